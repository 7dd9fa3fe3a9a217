"""The model as composable parts: one small interface (`base.Model`), the endpoint client, the
retries over a key pool, the fallback chain with its breakers, and the factory that composes
them from settings (quirks, prompt-mode tools and metering are parts too, in their own modules).
Nothing here loads the OpenAI SDK until the first request is sent."""
