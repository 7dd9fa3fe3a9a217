import urllib.parse

from bs4 import BeautifulSoup


async def search(msg: str, num: int):
    url = "https://example.invalid/?search=" + urllib.parse.quote_plus(msg)
    return BeautifulSoup(f"<p>{url}</p>", "html.parser").get_text()[:num]
