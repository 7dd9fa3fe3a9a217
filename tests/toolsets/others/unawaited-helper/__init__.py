from . import info


# Introduce: a sync wrapper around an async helper, which it forgets to await
def introduce():
    return str(info.introduce())


# Homepage: an async wrapper that forgets too
async def homepage():
    return str(info.homepage())


# Motto: a sync wrapper that hands the helper's coroutine back (Marsho awaits it)
def motto():
    return info.motto()
