from . import search as _search


async def search(msg: str, num: int = 3):
    return str(await _search.search(msg, num))
