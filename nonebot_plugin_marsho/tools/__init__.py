"""The tool system's public surface: load toolkits into a Toolset, run ToolCalls into ToolResults."""

from .loader import BUILTIN_TOOLSET, ToolsetSource, load_toolset, strip_json_comments
from .model import LoadProblem, Tool, ToolCall, ToolContext, Toolkit, ToolResult, Toolset
from .runner import ToolRunner

__all__ = [
    "BUILTIN_TOOLSET",
    "LoadProblem",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolResult",
    "ToolRunner",
    "Toolkit",
    "Toolset",
    "ToolsetSource",
    "load_toolset",
    "strip_json_comments",
]
