"""Words people type as a command's argument: on and off, reset, keywords (either language)."""

ON_WORDS = ("on", "yes", "true", "1", "开", "开启", "打开")
OFF_WORDS = ("off", "no", "false", "0", "关", "关闭")
RESET_WORDS = ("reset", "clear", "-", "重置", "清除")
KEYWORD_WORDS = ("keywords", "keyword", "关键词")
