"""The tool system's public surface: load toolkits into a Toolset, run ToolCalls into ToolResults."""

from ..fileformat import strip_json_comments
from .loader import BUILTIN_TOOLSET, ToolsetSource, load_toolset
from .model import (
    OWNER_CONTEXT,
    LoadProblem,
    Permission,
    Tool,
    ToolCall,
    ToolContext,
    Toolkit,
    ToolResponse,
    ToolResult,
    Toolset,
)
from .runner import ToolRunner
from .schema import ToolDefinitionError, function_tool
from .toolbox import Toolbox

__all__ = [
    "BUILTIN_TOOLSET",
    "OWNER_CONTEXT",
    "LoadProblem",
    "Permission",
    "ToolDefinitionError",
    "ToolResponse",
    "Toolbox",
    "function_tool",
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
