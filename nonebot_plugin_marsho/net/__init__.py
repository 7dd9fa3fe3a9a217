"""Reaching the web safely, for chat/media and the built-in toolkits alike: the address guard
that keeps requests off private and loopback addresses (guard) and one capped GET with its
redirects re-checked and one user agent (http).

May import only the standard library, httpx and the shared top-level modules.
"""
