"""Toolkit folders → a Toolset, naming the file of every problem. A toolkit is a folder with an
`__init__.py` and either a tools.json describing its functions (the toolkit format of
nonebot-plugin-marshoai) or functions that describe themselves (a Toolbox, or docstrings)."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
import sys
import traceback
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..fileformat import (
    FileFormatError,
    entry_label,
    json_type,
    read_file,
    read_json,
    validate,
)
from .model import LoadProblem, Permission, Tool, Toolkit, Toolset
from .naming import (
    SEPARATOR,
    ParametersSchema,
    check_toolkit_name,
    parameter_warnings,
    split_tool_name,
)
from .schema import ToolDefinitionError, check_permission, read_signature
from .toolbox import Toolbox

BUILTIN_TOOLSET = Path(__file__).resolve().parent.parent / "toolkits"
"""The toolkits shipped inside the package, in the same format users write."""

MODULE_NAMESPACE = "nonebot_plugin_marsho._toolkits"
"""Private package under which toolkit modules are imported, so no bare top-level names clash."""


@dataclass(frozen=True)
class ToolsetSource:
    """A folder of toolkit folders, and where its path came from (for messages)."""

    path: Path
    origin: str
    must_exist: bool = True


class _Problems:
    """Collects the problems of one toolkit."""

    def __init__(self, toolkit: str) -> None:
        self.toolkit = toolkit
        self.items: list[LoadProblem] = []

    def error(self, path: Path, message: str) -> None:
        self.items.append(LoadProblem(self.toolkit, path, message, "error"))

    def warning(self, path: Path, message: str) -> None:
        self.items.append(LoadProblem(self.toolkit, path, message, "warning"))

    def errors(self, error: FileFormatError) -> None:
        for message in error.messages:
            self.error(error.path, message)

    @property
    def failed(self) -> bool:
        return any(p.severity == "error" for p in self.items)


class ToolEntry(BaseModel):
    """One entry of a toolkit's tools.json, in nonebot-plugin-marshoai's format
    `{"type": "function", "function": {"name", "description", "parameters"}}` (plus our
    optional "permission"), read flat. Validate with `context={"toolkit": <folder name>}`."""

    model_config = ConfigDict(strict=True)  # other keys ("strict"...) are ignored

    name: str
    """The full tool name, `<toolkit>__<function>`."""
    description: str = ""
    parameters: ParametersSchema = Field(None, validate_default=True)
    permission: Permission | None = None

    @model_validator(mode="before")
    @classmethod
    def _unwrap(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        entry = data
        if "function" in entry:
            if not isinstance(entry["function"], dict):
                raise ValueError(f"'function' must be a JSON object, not {json_type(entry['function'])}")
            if entry.get("type", "function") != "function":
                raise ValueError(f"'type' must be \"function\", not {entry['type']!r}")
            data = {**entry["function"]}
            for key in ("permission", "required"):  # ours, and marshoai's misplaced "required"
                if key in entry and key not in data:
                    data[key] = entry[key]
        elif "name" not in entry:
            raise ValueError("has neither 'function' nor 'name'")
        parameters = data.get("parameters")
        if "required" in data and (parameters is None or isinstance(parameters, dict)):
            # marshoai's example puts "required" beside "parameters"; JSON Schema wants it inside
            data = {**data, "parameters": {"required": data["required"], **(parameters or {})}}
        return data

    @field_validator("name")
    @classmethod
    def _in_toolkit(cls, name: str, info: ValidationInfo) -> str:
        split_tool_name(name, (info.context or {})["toolkit"])
        return name

    @property
    def function(self) -> str:
        """The name of the function in `__init__.py`."""
        return self.name.split(SEPARATOR, 1)[1]


class ToolkitManifest(BaseModel):
    """A toolkit's optional toolkit.json: whether it loads unless enabled, and what it sends out."""

    model_config = ConfigDict(strict=True)  # other keys are ignored

    enabled_by_default: bool = True
    """False for toolkits that send data out or are dangerous: off until MARSHO_ENABLED_TOOLKITS."""
    sends: str = ""
    """What the toolkit sends out of the bot, and to whom (empty: nothing)."""


def _required_warning(raw: Any) -> str | None:
    """The warning for marshoai's "required" beside "parameters", which ToolEntry moves inside."""
    function = raw.get("function", raw) if isinstance(raw, dict) else None
    if not isinstance(function, dict):
        return None
    if "required" not in function and "required" not in raw:
        return None
    parameters = function.get("parameters")
    if isinstance(parameters, dict) and "required" in parameters:
        return "'required' stands beside 'parameters' and inside it; the one inside is used"
    return "'required' stands beside 'parameters'; moved inside 'parameters' where JSON Schema expects it"


def read_tools_json(path: Path, toolkit: str, problems: _Problems) -> list[ToolEntry]:
    """Parse and check a tools.json; problems go to `problems`, good entries are returned."""
    try:
        data = read_json(path)
    except FileFormatError as error:
        problems.errors(error)
        return []
    if isinstance(data, dict) and ("function" in data or "name" in data):
        problems.warning(path, "holds one tool definition, not a list; read as a list of one")
        data = [data]
    if not isinstance(data, list):
        problems.error(path, f"must be a JSON list of tool definitions, not {json_type(data)}")
        return []
    entries: list[ToolEntry] = []
    first_seen: dict[str, str] = {}
    for index, raw in enumerate(data):
        where = entry_label(None, index, raw.get("function", raw) if isinstance(raw, dict) else None)
        try:
            entry = validate(ToolEntry, raw, path, where=where, context={"toolkit": toolkit})
        except FileFormatError as error:
            problems.errors(error)
            continue
        if "function" not in raw:
            problems.warning(path, f"{where}: no {{\"type\": \"function\", \"function\": ...}} "
                             "wrapper; read as the function itself")
        warnings = [_required_warning(raw)] + parameter_warnings(entry.parameters)
        if not entry.description.strip():
            warnings.append("no 'description'; the model will not know when to call it")
        for warning in filter(None, warnings):
            problems.warning(path, f"{where}: {warning}")
        if entry.name in first_seen:
            problems.error(path, f"{where}: the tool name {entry.name!r} is already defined by "
                           f"{first_seen[entry.name]}")
            continue
        first_seen[entry.name] = where
        entries.append(entry)
    return entries


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
    spec: ToolEntry, module: types.ModuleType, toolboxes: list[Toolbox],
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
    try:
        check_toolkit_name(name)
    except ValueError as error:
        problems.error(folder, f"the toolkit folder's name {error}")
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


def read_manifest(folder: Path, problems: _Problems) -> ToolkitManifest:
    """The toolkit's `toolkit.json`, checked; the defaults when there is none (or it is broken)."""
    path = folder / MANIFEST
    if not path.is_file():
        return ToolkitManifest()
    try:
        return read_file(path, ToolkitManifest)
    except FileFormatError as error:
        problems.errors(error)
        return ToolkitManifest()


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
            if not manifest.enabled_by_default and name not in enabled_names:
                toolset.available[name] = manifest.sends
                continue
            if name in loaded_from:
                problems.error(folder, f"a toolkit named {name!r} is already loaded from "
                               f"{loaded_from[name]}; rename one of the folders")
            else:
                toolkit = load_toolkit(folder, problems, settings.get(name))
                if toolkit is not None:
                    toolkit.source = source.origin
                    toolkit.sends = manifest.sends
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
