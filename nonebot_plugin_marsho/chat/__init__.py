"""The chat face: the only layer that knows NoneBot events, bots and messages.

Owns the matchers and commands (matchers, poke), the question as the model gets it (incoming:
quotes, pictures), the answer as the chat gets it (outgoing, render, richtext, media), fair use,
watching a group's chat (observe), and the running bot assembled from the config (app). May
import agent/, store/, tools/, net/, config and the shared top-level modules; nothing imports
chat/ but the wiring (plugin.py).
"""
