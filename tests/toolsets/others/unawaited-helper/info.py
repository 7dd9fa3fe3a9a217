async def introduce():
    return "A toolkit that introduces its author."


async def homepage():
    return "https://example.invalid/author"


async def motto():
    return "Await what you call."
