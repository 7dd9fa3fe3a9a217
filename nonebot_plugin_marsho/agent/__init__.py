"""One turn with the model, NoneBot-free: the tool loop (engine), the endpoint client (llm,
prompt_mode) and what it does when providers fail (providers: retries, key pools, circuit
breakers, figures; quirks: model profiles), the system prompt (persona, praises), the token
budget (tokens, budget), the groups' recent chat (chatlog), and the library API for other code
(conversation).

May import store/, tools/ and the shared top-level modules (i18n, exceptions); never chat/,
config, or `nonebot.adapters`: settings and NoneBot context arrive as arguments.
"""
