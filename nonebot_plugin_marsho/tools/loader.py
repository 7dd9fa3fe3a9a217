"""Toolkit folders (tools.json + __init__.py, seed 000; or self-describing functions, seed 003)
→ a Toolset, naming the file of every problem."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import re
import sys
import traceback
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .model import SEPARATOR, TOOL_NAME_PATTERN, LoadProblem, Tool, Toolkit, Toolset
from .schema import ToolDefinitionError, check_permission, read_signature
from .toolbox import Toolbox

BUILTIN_TOOLSET = Path(__file__).resolve().parent.parent / "toolkits"
"""The toolkits shipped inside the package, in the same format users write."""

MODULE_NAMESPACE = "nonebot_plugin_marsho._toolkits"
"""Private package under which toolkit modules are imported, so no bare top-level names clash."""

TOOLKIT_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,60}$")


@dataclass(frozen=True)
class ToolsetSource:
    """A folder of toolkit folders, and where its path came from (for messages)."""

    path: Path
    origin: str
    must_exist: bool = True


def strip_json_comments(text: str) -> str:
    """Remove `#`, `//` and `/* */` comments outside strings, keeping every line where it was."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        char = text[i]
        if in_string:
            out.append(char)
            if char == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if char == '"':
                in_string = False
            i += 1
        elif char == '"':
            in_string = True
            out.append(char)
            i += 1
        elif char == "#" or text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end == -1 else end + 2
            # keep the newlines so that line numbers in later errors stay right
            out.append("\n" * text.count("\n", i, end))
            i = end
        else:
            out.append(char)
            i += 1
    return "".join(out)


class _Problems:
    """Collects the problems of one toolkit."""

    def __init__(self, toolkit: str) -> None:
        self.toolkit = toolkit
        self.items: list[LoadProblem] = []

    def error(self, path: Path, message: str) -> None:
        self.items.append(LoadProblem(self.toolkit, path, message, "error"))

    def warning(self, path: Path, message: str) -> None:
        self.items.append(LoadProblem(self.toolkit, path, message, "warning"))

    @property
    def failed(self) -> bool:
        return any(p.severity == "error" for p in self.items)


@dataclass(frozen=True)
class _ToolSpec:
    name: str
    function: str
    description: str
    parameters: dict[str, Any]
    permission: str | None = None


def _normalize_parameters(
    name: str, function: dict[str, Any], path: Path, problems: _Problems
) -> dict[str, Any] | None:
    parameters = function.get("parameters")
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        problems.error(path, f"{name}: 'parameters' must be a JSON object (a JSON Schema)")
        return None
    parameters = dict(parameters)
    parameters.setdefault("type", "object")
    if parameters["type"] != "object":
        problems.error(
            path, f"{name}: 'parameters' must be a schema of type \"object\", not {parameters['type']!r}"
        )
        return None
    parameters.setdefault("properties", {})
    if "required" in function:
        if "required" in parameters:
            problems.warning(path, f"{name}: 'required' stands beside 'parameters' and inside it; "
                             "the one inside is used")
        else:
            parameters["required"] = function["required"]
            problems.warning(path, f"{name}: 'required' stands beside 'parameters'; "
                             "moved inside 'parameters' where JSON Schema expects it")
    try:
        Draft202012Validator.check_schema(parameters)
    except SchemaError as error:
        where = "/".join(str(part) for part in error.absolute_path) or "(top)"
        problems.error(
            path, f"{name}: 'parameters' is not a valid JSON Schema at {where}: {error.message}"
        )
        return None
    properties = parameters.get("properties")
    if isinstance(properties, dict):
        for missing in [r for r in parameters.get("required", []) if r not in properties]:
            problems.warning(path, f"{name}: 'required' names {missing!r}, which is not in 'properties'")
    return parameters


def _read_entry(
    index: int, entry: Any, toolkit: str, path: Path, problems: _Problems
) -> _ToolSpec | None:
    where = f"entry {index + 1}"
    if not isinstance(entry, dict):
        problems.error(path, f"{where}: must be a JSON object, not {type(entry).__name__}")
        return None
    if "function" in entry:
        function = entry["function"]
        if not isinstance(function, dict):
            problems.error(path, f"{where}: 'function' must be a JSON object")
            return None
        if entry.get("type", "function") != "function":
            problems.error(path, f"{where}: 'type' must be \"function\", not {entry['type']!r}")
            return None
        if "required" in entry and "required" not in function:
            function = {**function, "required": entry["required"]}
    elif "name" in entry:
        function = entry
        problems.warning(path, f"{where}: no {{\"type\": \"function\", \"function\": ...}} "
                         "wrapper; read as the function itself")
    else:
        problems.error(path, f"{where}: has neither 'function' nor 'name'")
        return None

    name = function.get("name")
    if not isinstance(name, str) or not name:
        problems.error(path, f"{where}: 'function.name' is missing or not a string")
        return None
    prefix = toolkit + SEPARATOR
    if not name.startswith(prefix):
        problems.error(
            path, f"{where}: tool name {name!r} must start with {prefix!r} "
            f"(the toolkit folder's name, two underscores, then the function's name)"
        )
        return None
    func_name = name[len(prefix):]
    if not func_name or SEPARATOR in func_name:
        problems.error(path, f"{where}: in {name!r} the function part {func_name!r} must be a "
                       f"non-empty name without '{SEPARATOR}'")
        return None
    if not TOOL_NAME_PATTERN.match(name):
        problems.error(path, f"{where}: tool name {name!r} must be 1-64 letters, digits, '_' or '-' "
                       "(what OpenAI-compatible endpoints accept)")
        return None
    description = function.get("description", "")
    if not isinstance(description, str):
        problems.error(path, f"{name}: 'description' must be a string")
        return None
    if not description.strip():
        problems.warning(path, f"{name}: no 'description'; the model will not know when to call it")
    parameters = _normalize_parameters(name, function, path, problems)
    if parameters is None:
        return None
    permission = entry.get("permission")
    if permission is not None:
        try:
            check_permission(permission, name)
        except ToolDefinitionError as error:
            problems.error(path, str(error))
            return None
    return _ToolSpec(name, func_name, description, parameters, permission)


def read_tools_json(path: Path, toolkit: str, problems: _Problems) -> list[_ToolSpec]:
    """Parse and check a tools.json; problems go to `problems`, good entries are returned."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        problems.error(path, f"not UTF-8 text (byte {error.start}): save it as UTF-8")
        return []
    except OSError as error:
        problems.error(path, f"cannot be read: {error.strerror}")
        return []
    try:
        data = json.loads(strip_json_comments(text))
    except json.JSONDecodeError as error:
        problems.error(path, f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}")
        return []
    if isinstance(data, dict) and ("function" in data or "name" in data):
        problems.warning(path, "holds one tool definition, not a list; read as a list of one")
        data = [data]
    if not isinstance(data, list):
        problems.error(path, f"must be a JSON list of tool definitions, not a {type(data).__name__}")
        return []
    specs: list[_ToolSpec] = []
    first_seen: dict[str, int] = {}
    for index, entry in enumerate(data):
        spec = _read_entry(index, entry, toolkit, path, problems)
        if spec is None:
            continue
        if spec.name in first_seen:
            problems.error(path, f"entry {index + 1}: tool name {spec.name!r} is already defined "
                           f"by entry {first_seen[spec.name] + 1}")
            continue
        first_seen[spec.name] = index
        specs.append(spec)
    return specs


def _ensure_namespace() -> None:
    if MODULE_NAMESPACE not in sys.modules:
        namespace = types.ModuleType(MODULE_NAMESPACE)
        namespace.__path__ = []
        sys.modules[MODULE_NAMESPACE] = namespace


def _forget_module(name: str) -> None:
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


def _where_in_folder(error: BaseException, folder: Path) -> str:
    """'helpers.py line 3' for the deepest traceback frame inside the toolkit folder."""
    found = ""
    for frame in traceback.extract_tb(error.__traceback__):
        try:
            relative = Path(frame.filename).resolve().relative_to(folder.resolve())
        except ValueError:
            continue
        found = f" (at {relative} line {frame.lineno})"
    if isinstance(error, SyntaxError) and error.filename and error.lineno:
        found = f" (at {Path(error.filename).name} line {error.lineno})"
    return found


def import_toolkit_module(toolkit: str, folder: Path) -> types.ModuleType:
    """Import a toolkit's `__init__.py` under the private namespace; siblings import relatively."""
    _ensure_namespace()
    digest = hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:8]
    module_name = f"{MODULE_NAMESPACE}.{re.sub(r'[^0-9A-Za-z_]', '_', toolkit)}_{digest}"
    _forget_module(module_name)
    spec = importlib.util.spec_from_file_location(
        module_name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        _forget_module(module_name)
        raise
    return module


def _without_presets(parameters: dict[str, Any], hidden: set[str]) -> dict[str, Any]:
    """The schema minus the parameters the owner presets: the model must not see them."""
    if not hidden:
        return parameters
    properties = {k: v for k, v in parameters.get("properties", {}).items() if k not in hidden}
    result = {**parameters, "properties": properties}
    if "required" in parameters:
        result["required"] = [r for r in parameters["required"] if r not in hidden]
    return result


def _tool_from_spec(
    spec: _ToolSpec, module: types.ModuleType, toolboxes: list[Toolbox],
    settings: Mapping[str, Any], tools_file: Path, problems: _Problems,
) -> Tool | None:
    func = getattr(module, spec.function, None)
    if func is None:
        problems.error(tools_file, f"{spec.name}: __init__.py has no function {spec.function!r}")
        return None
    if not callable(func):
        problems.error(tools_file, f"{spec.name}: {spec.function!r} in __init__.py is a "
                       f"{type(func).__name__}, not a function")
        return None
    try:
        signature = read_signature(func)
    except ToolDefinitionError as error:
        problems.error(tools_file, f"{spec.name}: {error}")
        return None
    registration = next(
        (r for box in toolboxes if (r := box.registration_of(func)) is not None), None
    )
    presets = {
        **(registration.presets if registration else {}),
        **{k: v for k, v in settings.items() if k in signature.names},
    }
    parameters = _without_presets(spec.parameters, set(presets))
    offered = set(parameters.get("properties", {}))
    for name in parameters.get("required", []):
        if not signature.accepts(name):
            problems.error(tools_file, f"{spec.name}: 'required' lists {name!r}, but "
                           f"{spec.function}() has no such parameter")
    for name in sorted(signature.required - offered - set(presets)):
        problems.error(tools_file, f"{spec.name}: {spec.function}() needs {name!r} (it has no "
                       "default), but the schema does not offer it to the model")
    for name in sorted(offered - signature.names):
        if not signature.takes_kwargs:
            problems.warning(tools_file, f"{spec.name}: the schema offers {name!r}, but "
                             f"{spec.function}() has no such parameter; a call using it will fail")
    permission = spec.permission or (registration.permission if registration else "everyone")
    return Tool(
        spec.name, spec.description, parameters, func,
        permission=check_permission(permission, spec.name), presets=presets,
        context_param=signature.context_param,
    )


def _documented_functions(module: types.ModuleType) -> list[Any]:
    """Public functions defined in the module itself that have a docstring."""
    return [
        value for key, value in vars(module).items()
        if not key.startswith("_") and inspect.isfunction(value)
        and value.__module__ == module.__name__ and inspect.getdoc(value)
    ]


def _self_described_tools(
    name: str, module: types.ModuleType, toolboxes: list[Toolbox], settings: Mapping[str, Any]
) -> list[Tool]:
    if toolboxes:
        return [tool for box in toolboxes for tool in box.build(name, settings)]
    box = Toolbox()
    for func in _documented_functions(module):
        box.add(func)
    return box.build(name, settings)


def load_toolkit(
    folder: Path, problems: _Problems, settings: Mapping[str, Any] | None = None
) -> Toolkit | None:
    """Load one toolkit folder; None (with errors in `problems`) when it cannot be used.

    With a tools.json, it describes the tools; without one, the functions describe themselves:
    those registered in a Toolbox, else the public documented functions of `__init__.py`.
    `settings` are the owner's presets for this toolkit (MARSHO_TOOLKIT_SETTINGS).
    """
    settings = settings or {}
    name = folder.name
    if SEPARATOR in name:
        problems.error(folder, f"toolkit folder name {name!r} must not contain '{SEPARATOR}' "
                       "(it separates toolkit and function in tool names)")
        return None
    if not TOOLKIT_NAME_PATTERN.match(name):
        problems.error(folder, f"toolkit folder name {name!r} may hold only letters, digits, '_' "
                       "and '-' (it becomes part of every tool name)")
        return None
    init_file = folder / "__init__.py"
    tools_file = folder / "tools.json"
    if not init_file.is_file():
        problems.error(init_file, "missing: a toolkit folder needs an __init__.py holding its functions")
        return None
    specs = read_tools_json(tools_file, name, problems) if tools_file.is_file() else None
    if problems.failed:
        return None
    try:
        module = import_toolkit_module(name, folder)
    except (Exception, SystemExit) as error:
        problems.error(init_file, f"import failed: {type(error).__name__}: {error}"
                       f"{_where_in_folder(error, folder)}")
        return None
    toolboxes = [value for value in vars(module).values() if isinstance(value, Toolbox)]
    tools: list[Tool] = []
    if specs is not None:
        for spec in specs:
            tool = _tool_from_spec(spec, module, toolboxes, settings, tools_file, problems)
            if tool is not None:
                tools.append(tool)
    else:
        try:
            tools = _self_described_tools(name, module, toolboxes, settings)
        except ToolDefinitionError as error:
            problems.error(init_file, str(error))
            return None
        seen: set[str] = set()
        for tool in tools:
            if tool.name in seen:
                problems.error(init_file, f"tool name {tool.name!r} is registered twice")
            elif not TOOL_NAME_PATTERN.match(tool.name):
                problems.error(init_file, f"tool name {tool.name!r} must be 1-64 letters, "
                               "digits, '_' or '-'")
            seen.add(tool.name)
        if not tools:
            problems.error(init_file, "no tools: add a tools.json, register functions in a "
                           "Toolbox, or give __init__.py public functions with docstrings")
    if problems.failed:
        return None
    for tool in tools:
        tool.toolkit = name
    used = {key for tool in tools for key in tool.presets}
    for key in sorted(set(settings) - used):
        problems.warning(folder, f"setting {key!r} (MARSHO_TOOLKIT_SETTINGS) matches no "
                         "parameter of any tool in this toolkit")
    return Toolkit(name=name, path=folder, tools=tools)


def _is_toolkit_folder(path: Path) -> bool:
    return (path / "__init__.py").is_file() or (path / "tools.json").is_file()


def _toolkit_folders(source: ToolsetSource, toolset: Toolset) -> list[Path]:
    path = source.path
    if not path.exists():
        if source.must_exist:
            toolset.problems.append(LoadProblem("", path, f"toolset folder does not exist "
                                                f"(from {source.origin})"))
        return []
    if not path.is_dir():
        toolset.problems.append(LoadProblem("", path, f"is not a folder (from {source.origin})"))
        return []
    if _is_toolkit_folder(path):
        return [path]  # a toolkit folder given directly
    return sorted(
        child for child in path.iterdir()
        if child.is_dir() and not child.name.startswith((".", "__")) and _is_toolkit_folder(child)
    )


MANIFEST = "toolkit.json"
"""Optional file beside `__init__.py`: {"enabled_by_default": false, "sends": "what goes where"}."""


def read_manifest(folder: Path, problems: _Problems) -> dict[str, Any]:
    """The toolkit's `toolkit.json`, checked; {} when there is none."""
    path = folder / MANIFEST
    if not path.is_file():
        return {}
    try:
        data = json.loads(strip_json_comments(path.read_text(encoding="utf-8-sig")))
    except (OSError, UnicodeDecodeError) as error:
        problems.error(path, f"cannot be read: {error}")
        return {}
    except json.JSONDecodeError as error:
        problems.error(path, f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}")
        return {}
    if not isinstance(data, dict):
        problems.error(path, "must be a JSON object such as {\"enabled_by_default\": false}")
        return {}
    if not isinstance(data.get("enabled_by_default", True), bool):
        problems.error(path, "'enabled_by_default' must be true or false")
    if not isinstance(data.get("sends", ""), str):
        problems.error(path, "'sends' must be a string saying what the toolkit sends where")
    return data


def load_toolset(
    sources: Sequence[ToolsetSource],
    disabled: Iterable[str] = (),
    *,
    enabled: Iterable[str] = (),
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    disabled_tools: Iterable[str] = (),
    permissions: Mapping[str, str] | None = None,
) -> Toolset:
    """Load every toolkit folder of the sources in order; broken ones are skipped and reported.

    `disabled` names toolkit folders to skip; a toolkit whose toolkit.json says
    `"enabled_by_default": false` (those that send data out, or are dangerous) loads only when
    `enabled` names it. `disabled_tools` skips single tools; `settings` maps a toolkit to its
    presets; `permissions` overrides the permission of a tool or a whole toolkit.
    """
    settings = settings or {}
    permissions = permissions or {}
    disabled_tool_names = set(disabled_tools)
    disabled_names = set(disabled)
    enabled_names = set(enabled)
    toolset = Toolset()
    loaded_from: dict[str, Path] = {}
    for source in sources:
        for folder in _toolkit_folders(source, toolset):
            name = folder.name
            if name in disabled_names:
                toolset.disabled.append(name)
                continue
            problems = _Problems(name)
            manifest = read_manifest(folder, problems)
            if problems.failed:
                toolset.problems.extend(problems.items)
                continue
            if not manifest.get("enabled_by_default", True) and name not in enabled_names:
                toolset.available[name] = manifest.get("sends", "")
                continue
            if name in loaded_from:
                problems.error(folder, f"a toolkit named {name!r} is already loaded from "
                               f"{loaded_from[name]}; rename one of the folders")
            else:
                toolkit = load_toolkit(folder, problems, settings.get(name))
                if toolkit is not None:
                    toolkit.source = source.origin
                    toolkit.sends = manifest.get("sends", "")
                    toolset.disabled.extend(
                        t.name for t in toolkit.tools if t.name in disabled_tool_names
                    )
                    toolkit.tools = [t for t in toolkit.tools if t.name not in disabled_tool_names]
                    for tool in toolkit.tools:
                        override = permissions.get(tool.name) or permissions.get(name)
                        try:
                            if override:
                                tool.permission = check_permission(override, tool.name)
                        except ToolDefinitionError as error:  # the tool keeps its own
                            problems.warning(folder, f"MARSHO_TOOL_PERMISSIONS: {error}")
                    toolset.add(toolkit)
                    toolset.available.pop(name, None)  # a user's toolkit of the same name
                    loaded_from[name] = folder
            toolset.problems.extend(problems.items)
    return toolset
