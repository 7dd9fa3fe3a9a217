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
    def _unwrap(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        data, warnings = _normalize_entry(data)
        found = (info.context or {}).get("warnings")
        if found is not None:
            found.extend(warnings)
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


def _normalize_entry(entry: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A tools.json entry read flat (the function's fields, plus "permission"), with marshoai's
    slips mended, and a warning for each: "required" beside "parameters" (marshoai's own example)
    moved inside, and "require" (megakits' spelling, beside or inside) read as "required"."""
    warnings: list[str] = []
    data = _flat_entry(entry)
    parameters = data.get("parameters")
    if isinstance(parameters, dict) and "require" in parameters:
        parameters = _require_inside(parameters, warnings)
        data["parameters"] = parameters
    if parameters is not None and not isinstance(parameters, dict):
        return data, warnings  # the field's own check says what is wrong
    for key in ("required", "require"):
        if key in data:
            parameters = _required_beside(data, key, parameters, warnings)
    return data, warnings


def _flat_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry's function fields: {"type": "function", "function": {...}} (OpenAI's shape, with
    our "permission" and marshoai's misplaced "required"/"require" beside it) or the fields
    themselves."""
    if "function" in entry:
        if not isinstance(entry["function"], dict):
            raise ValueError(f"'function' must be a JSON object, not {json_type(entry['function'])}")
        if entry.get("type", "function") != "function":
            raise ValueError(f"'type' must be \"function\", not {entry['type']!r}")
        data = {**entry["function"]}
        for key in ("permission", "required", "require"):  # ours, and marshoai's misplaced ones
            if key in entry and key not in data:
                data[key] = entry[key]
        return data
    if "name" not in entry:
        raise ValueError("has neither 'function' nor 'name'")
    return {**entry}


def _require_inside(parameters: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """'parameters' with its "require" read as "required", or dropped when both are there."""
    if "required" in parameters:
        warnings.append("'parameters' has both 'require' and 'required'; 'require' (not a "
                        "JSON Schema keyword) is ignored")
        return {k: v for k, v in parameters.items() if k != "require"}
    warnings.append(f"'require' inside 'parameters' is read as 'required' (JSON Schema's "
                    f"spelling); as written, {_names(parameters['require'])} would be "
                    "optional to the model")
    return {("required" if k == "require" else k): v for k, v in parameters.items()}


def _required_beside(
    data: dict[str, Any], key: str, parameters: dict[str, Any] | None, warnings: list[str]
) -> dict[str, Any] | None:
    """Take `key` ("required" or "require") out of `data` and put it inside 'parameters' as
    "required", unless 'parameters' has one already; the parameters as they now are."""
    value = data.pop(key)
    if parameters is not None and "required" in parameters:
        inside = "inside it is used" if key == "required" else "there is used"
        warnings.append(f"{key!r} stands beside 'parameters', and 'parameters' has 'required' "
                        f"too; the one {inside}")
        return parameters
    parameters = {"required": value, **(parameters or {})}
    data["parameters"] = parameters
    if key == "required":
        warnings.append("'required' stands beside 'parameters'; moved inside 'parameters' "
                        "where JSON Schema expects it")
    else:
        warnings.append(f"'require' beside 'parameters' is read as 'required' and moved "
                        f"inside 'parameters' (JSON Schema's spelling and place); as written, "
                        f"{_names(value)} would be optional to the model")
    return parameters


def _names(value: Any) -> str:
    """'upper', 'a' and 'b' for a list of names, for messages."""
    if not isinstance(value, list) or not value:
        return "its parameters"
    shown = [repr(v) for v in value]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


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
        mended: list[str] = []
        try:
            entry = validate(ToolEntry, raw, path, where=where,
                             context={"toolkit": toolkit, "warnings": mended})
        except FileFormatError as error:
            problems.errors(error)
            continue
        if "function" not in raw:
            problems.warning(path, f"{where}: no {{\"type\": \"function\", \"function\": ...}} "
                             "wrapper; read as the function itself")
        warnings: list[str | None] = [*mended, *parameter_warnings(entry.parameters)]
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


PIP_PACKAGES = {
    "bs4": "beautifulsoup4",
    "yaml": "PyYAML",
    "PIL": "Pillow",
    "cv2": "opencv-python",
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
    "dateutil": "python-dateutil",
    "dotenv": "python-dotenv",
    "Crypto": "pycryptodome",
    "Cryptodome": "pycryptodomex",
    "jwt": "PyJWT",
    "fitz": "PyMuPDF",
    "docx": "python-docx",
    "pptx": "python-pptx",
    "magic": "python-magic",
    "serial": "pyserial",
    "OpenSSL": "pyOpenSSL",
    "attr": "attrs",
    "google.protobuf": "protobuf",
    "zmq": "pyzmq",
    "socks": "PySocks",
    "git": "GitPython",
    "win32api": "pywin32",
    "nonebot": "nonebot2",
    "jose": "python-jose",
    "multipart": "python-multipart",
    "Levenshtein": "levenshtein",
    "pypinyin": "pypinyin",
}
"""Modules whose pip package has another name: what an import error tells the owner to install."""

MARSHOAI_MODULE = "nonebot_plugin_marshoai"

_MARSHOAI_PLUGIN = re.compile(
    rf"^\s*(?:from\s+{MARSHOAI_MODULE}\.plugin\b|import\s+{MARSHOAI_MODULE}\.plugin\b"
    r"|@on_function_call\b|__marsho_meta__\s*=)",
    re.MULTILINE,
)
"""marshoai's plugin format (1.0 on): `@on_function_call(...)` from `nonebot_plugin_marshoai.plugin`."""

MARSHOAI_PLUGIN = ("this is a nonebot-plugin-marshoai plugin, not a toolkit folder; see docs/en/toolkits.md "
                   "(\"Imports, problems and testing\"): {how}")
_MARSHOAI_PLUGIN_HOW = ("Marsho does not run marshoai's plugin API (on_function_call, "
                        "__marsho_meta__): rewrite it as a toolkit, each function's description= "
                        "as its docstring and its .params(...) as type hints")


def _missing_module(error: ModuleNotFoundError, folder: Path, module_name: str) -> tuple[str, str]:
    """(what is missing, what to do): a file of the toolkit's own, marshoai's code, or a module
    of a pip package (the package named where its name differs from the module's)."""
    name = error.name or ""
    if name == module_name or name.startswith(module_name + "."):
        return _missing_own_module(name[len(module_name) + 1:] or "__init__", folder)
    top = name.split(".")[0]
    if top == MARSHOAI_MODULE:
        return _marshoai_code_imported(error, folder)
    if not name:
        return f"{type(error).__name__}: {error}", ""
    return _missing_installed_module(name, top)


def _missing_own_module(own: str, folder: Path) -> tuple[str, str]:
    """A module of the toolkit folder itself (`own`, relative to it) is missing; a file whose
    name differs only in case is named."""
    first = own.split(".")[0]
    near = [p.name for p in folder.iterdir() if p.stem.lower() == first.lower()
            and p.stem != first] if folder.is_dir() else []
    hint = f"; {', '.join(near)} is there, but names are case-sensitive" if near else ""
    return (f"the toolkit's own module {own!r} is missing",
            f"there is no {first}.py (nor a {first}/ folder) in {folder}{hint}")


def _marshoai_code_imported(error: ModuleNotFoundError, folder: Path) -> tuple[str, str]:
    """The toolkit imports nonebot_plugin_marshoai: a marshoai plugin, or a toolkit that borrows
    marshoai's code."""
    line = _failing_line(error, folder)
    if f"{MARSHOAI_MODULE}.plugin" in line or "on_function_call" in line:
        return MARSHOAI_PLUGIN.format(how=_MARSHOAI_PLUGIN_HOW), ""
    shown = f" (`{line}`)" if line else ""
    return (f"it imports nonebot-plugin-marshoai's own code{shown}",
            "Marsho neither provides nor needs it: copy what the toolkit uses from it into "
            "the toolkit (see docs/en/toolkits.md, \"Imports, problems and testing\")")


def _missing_installed_module(name: str, top: str) -> tuple[str, str]:
    """A module outside the toolkit: a part its installed package lacks, or a package to
    install (named from PIP_PACKAGES where it differs from the module)."""
    if top != name and name not in PIP_PACKAGES:
        try:
            installed = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            installed = False
        if installed:
            return (f"ModuleNotFoundError: the module {name!r} does not exist",
                    f"{top!r} is installed, but has no such part: another version than the "
                    "toolkit was written for?")
    package = PIP_PACKAGES.get(name) or PIP_PACKAGES.get(top) or top
    provider = f"the pip package {package} provides it: " if package != top else ""
    return (f"ModuleNotFoundError: the module {name!r} is not installed",
            f"{provider}pip install {package} (into the Python environment the bot runs in)")


def _failing_line(error: BaseException, folder: Path) -> str:
    """The source line of the deepest traceback frame inside the toolkit folder ("" if none)."""
    line = ""
    for frame in traceback.extract_tb(error.__traceback__):
        if Path(frame.filename).resolve().is_relative_to(folder.resolve()):
            line = (frame.line or "").strip()
    return line


def _import_problem(error: BaseException, folder: Path, module_name: str) -> str:
    """The import error as the author reads it: what failed, the file and line, what to do."""
    where = _where_in_folder(error, folder)
    if isinstance(error, ModuleNotFoundError):
        what, advice = _missing_module(error, folder, module_name)
        return f"import failed: {what}{where}" + (f"; {advice}" if advice else "")
    if isinstance(error, ImportError) and error.name == module_name:  # from . import sibling
        wanted = re.match(r"cannot import name '([^']+)'", str(error))
        if wanted and not any((folder / n).exists() for n in (wanted[1] + ".py", wanted[1])):
            missing = ModuleNotFoundError(name=f"{module_name}.{wanted[1]}")
            what, advice = _missing_module(missing, folder, module_name)
            return f"import failed: {what}, or __init__.py lacks the name{where}; {advice}"
    if isinstance(error, SyntaxError):  # str() already names the file and line: not twice
        return f"import failed: {type(error).__name__}: {error.msg}{where or _syntax_where(error, folder)}"
    text = f"{type(error).__name__}: {error}".replace(module_name, folder.name)
    return f"import failed: {text}{where}"


def _syntax_where(error: SyntaxError, folder: Path) -> str:
    """' (at kit/helpers.py line 3)' for a syntax error the traceback does not place."""
    if not error.filename:
        return ""
    path = Path(error.filename)
    shown = path.relative_to(folder) if path.is_relative_to(folder) else path.name
    return f" (at {shown} line {error.lineno})"


def _module_name(toolkit: str, folder: Path) -> str:
    digest = hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:8]
    return f"{MODULE_NAMESPACE}.{re.sub(r'[^0-9A-Za-z_]', '_', toolkit)}_{digest}"


def import_toolkit_module(toolkit: str, folder: Path) -> types.ModuleType:
    """Import a toolkit's `__init__.py` under the private namespace; siblings import relatively."""
    _ensure_namespace()
    module_name = _module_name(toolkit, folder)
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
    listed = set(parameters.get("required", []))
    for name in sorted((signature.required & offered) - listed):
        problems.warning(tools_file, f"{spec.name}: {spec.function}() needs {name!r} (it has no "
                         "default), but the schema leaves it optional ('required' does not list "
                         "it), so the model may leave it out; list it in 'required' or give it "
                         "a default")
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
    init_file = folder / "__init__.py"
    tools_file = folder / "tools.json"
    if not _is_loadable(folder, init_file, problems):
        return None
    has_tools_json = tools_file.is_file()
    other_format = None if has_tools_json else _other_tools_file(folder)
    specs = read_tools_json(tools_file, name, problems) if has_tools_json else None
    if problems.failed:
        return None
    try:
        module = import_toolkit_module(name, folder)
    except (Exception, SystemExit) as error:
        problems.error(init_file, _import_problem(error, folder, _module_name(name, folder)))
        return None
    toolboxes = [value for value in vars(module).values() if isinstance(value, Toolbox)]
    if specs is not None:
        tools = [tool for spec in specs if (tool := _tool_from_spec(
            spec, module, toolboxes, settings, tools_file, problems)) is not None]
    else:
        try:
            tools = _self_described_tools(name, module, toolboxes, settings)
        except ToolDefinitionError as error:
            problems.error(init_file, str(error))
            return None
        _check_self_described(tools, init_file, other_format, problems)
    if problems.failed:
        return None
    for tool in tools:
        tool.toolkit = name
    _warn_unused_settings(folder, settings, tools, problems)
    return Toolkit(name=name, path=folder, tools=tools)


def _is_loadable(folder: Path, init_file: Path, problems: _Problems) -> bool:
    """Whether the folder can be a toolkit before reading it: a good name, an __init__.py, and
    not marshoai's plugin format (an error in `problems` for the first that fails)."""
    try:
        check_toolkit_name(folder.name)
    except ValueError as error:
        problems.error(folder, f"the toolkit folder's name {error}")
        return False
    if not init_file.is_file():
        problems.error(init_file, "missing: a toolkit folder needs an __init__.py holding its functions")
        return False
    if _is_marshoai_plugin(init_file):
        problems.error(init_file, MARSHOAI_PLUGIN.format(how=_MARSHOAI_PLUGIN_HOW))
        return False
    return True


def _check_self_described(
    tools: list[Tool], init_file: Path, other_format: Path | None, problems: _Problems
) -> None:
    """Problems of tools described by their functions: a name registered twice, no tools, and a
    tools.yaml (or the like) that is not read."""
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            problems.error(init_file, f"tool name {tool.name!r} is registered twice")
        seen.add(tool.name)
    if not tools and other_format is not None:
        problems.error(other_format, "found, but Marsho reads tool descriptions only from "
                       "tools.json, so this toolkit has no tools: write the same entries as "
                       "JSON in tools.json (marshoai's format), or describe the functions in "
                       "__init__.py (docs/en/toolkits.md)")
    elif not tools:
        problems.error(init_file, "no tools: add a tools.json, register functions in a "
                       "Toolbox, or give __init__.py public functions with docstrings")
    elif other_format is not None:
        problems.warning(other_format, "not read: Marsho reads tool descriptions only from "
                         "tools.json; the tools of this toolkit come from __init__.py")


def _warn_unused_settings(
    folder: Path, settings: Mapping[str, Any], tools: list[Tool], problems: _Problems
) -> None:
    used = {key for tool in tools for key in tool.presets}
    for key in sorted(set(settings) - used):
        problems.warning(folder, f"setting {key!r} (MARSHO_TOOLKIT_SETTINGS) matches no "
                         "parameter of any tool in this toolkit")


OTHER_TOOLS_FILES = ("tools.yaml", "tools.yml")
"""Tool descriptions in a format Marsho does not read: named in the message, not ignored."""


def _other_tools_file(folder: Path) -> Path | None:
    return next((folder / n for n in OTHER_TOOLS_FILES if (folder / n).is_file()), None)


def _is_marshoai_plugin(init_file: Path) -> bool:
    """True for a folder in marshoai's plugin format (read before importing it, which would fail
    on `nonebot_plugin_marshoai` and send the owner to install marshoai)."""
    try:
        data = init_file.read_bytes()
    except OSError:
        return False  # the import says why
    return MARSHOAI_MODULE.encode() in data and _MARSHOAI_PLUGIN.search(
        data.decode("utf-8", errors="replace")) is not None


def _is_toolkit_folder(path: Path) -> bool:
    return (path / "__init__.py").is_file() or (path / "tools.json").is_file() or any(
        (path / n).is_file() for n in OTHER_TOOLS_FILES
    )


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
