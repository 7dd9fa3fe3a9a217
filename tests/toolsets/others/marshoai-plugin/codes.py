def shout(msg: str) -> str:
    return msg.upper()
