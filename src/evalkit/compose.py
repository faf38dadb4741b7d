"""Composing a run's configuration: Hydra's compose API, one-line composition errors, and
the resolution of a composed config into a validated :class:`~evalkit.config.EvalConfig`
(the user simulator's model included). Used by the command line, the sweep and the tests.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any, Sequence

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from evalkit import config, secrets
from evalkit.benchmarks import entry_point_names, get_benchmark_class
from evalkit.benchmarks.base import Benchmark, selection_of
from evalkit.config import EvalConfig, resolve_layers, validate
from evalkit.errors import ConfigError, DataError, RunDirError, printable
from evalkit.untrusted import MAX_YAML_BYTES, check_yaml_file, load_yaml, read_bytes
from evalkit.providers import takes_images

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
#: environment variable naming the user's config directories (``os.pathsep``-separated),
#: added to Hydra's search path after evalkit's own ``conf/``: a benchmark from outside
#: evalkit keeps its YAML there (``<dir>/benchmark/<name>.yaml``), as can models. An option
#: chosen for a run that is defined in two places (``conf/`` and one of these, or two of
#: these) is refused in one line naming both files (:func:`check_chosen`): Hydra would take
#: the first silently
CONFIG_DIR_ENV = "EVALKIT_CONFIG_DIR"


def search_path_overrides(environ: Any = None) -> list[str]:
    """``["hydra.searchpath=[file:///abs/dir,...]"]`` from :data:`CONFIG_DIR_ENV` (``[]`` when
    unset). Hydra looks up a config group option in ``conf/`` first, then in these.

    Raises:
        ConfigError: a named directory does not exist.
    """
    environ = os.environ if environ is None else environ
    dirs = [d for d in str(environ.get(CONFIG_DIR_ENV) or "").split(os.pathsep) if d]
    paths = []
    for d in dirs:
        path = Path(d).expanduser().resolve()
        if not path.is_dir():
            raise ConfigError(f"{CONFIG_DIR_ENV}: {d!r} is not a directory")
        paths.append(f"file://{path}")
    return [f"hydra.searchpath=[{','.join(repr(p) for p in paths)}]"] if paths else []


_GROUP_CHOICE = re.compile(r"^[+~]*([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def config_files(overrides: Sequence[str], environ: Any = None) -> list[Path]:
    """The YAML files Hydra may read for ``overrides``, each checked as it is found, before
    Hydra reads any of them: ``conf/config.yaml``; each option a ``group=option`` override
    names (each option of a sweep's ``a,b``; ``judge=`` names model configs); and, file by
    file, each option a checked file's own ``defaults`` list names (``override`` entries,
    nested groups, configs at the root (``/name``) and the options of ``conf/config.yaml``'s
    defaults that an override replaces included: a superset of what Hydra reads) — in
    ``conf/`` and in every directory of :data:`CONFIG_DIR_ENV` (the paths that exist,
    whatever their file type). Each file is checked by :func:`evalkit.untrusted.check_yaml_file`
    (bounds, a regular file) and, unless it is Hydra's own settings in evalkit's ``conf/``
    (:func:`hydra_own`), by :func:`check_data_only` (data, not code). Which options the run
    chooses is Hydra's answer, read after composing (:func:`check_chosen`).

    Raises:
        ConfigError: a config directory holding Hydra's own group (``hydra/``); a file that
            is not a regular file, over a bound, unreadable, or that is not data only (one
            line naming the file and the key).
    """
    extra = config_dirs(environ)
    for d in extra:
        for name in ("hydra", "hydra.yaml"):
            if os.path.lexists(d / name):
                raise ConfigError(f"{printable(str(d / name))}: a config directory of {CONFIG_DIR_ENV} holds no hydra group "
                                  f"(Hydra's own settings, whose callbacks and launchers are code, are evalkit's conf/); "
                                  f"remove it (README: Trust)")  # fmt: skip
    dirs = [CONF_DIR, *extra]
    todo = [("", "config"), *((g, o) for g, opts in sorted(override_choices(overrides).items()) for o in sorted(opts))]
    seen: set[tuple[str, str]] = set()
    files = []
    while todo:
        group, option = todo.pop(0)
        if (group, option) in seen:
            continue
        seen.add((group, option))
        rel = Path(group, f"{option}.yaml")
        # every file that is there, links and non-regular files too: the check refuses
        # those by name (Hydra would skip them, and say "unknown <group>"); the primary
        # config is conf/config.yaml (Hydra finds it first on the search path)
        for path in [CONF_DIR / rel] if (group, option) == ("", "config") else [d / rel for d in dirs]:
            if os.path.lexists(path):
                read = check_yaml_file(path, ConfigError)
                if read is not None and not hydra_own(path):
                    check_data_only(path, group, *read)
                files.append(path)
                todo += defaults_named(path, group)
    return files


def hydra_own(path: Path) -> bool:
    """True for the files of evalkit's ``conf/`` that are Hydra's own settings: the primary
    config (``conf/config.yaml``: its ``hydra`` block, the sweep callback) and the launchers
    (``conf/hydra/``). Every other config file — a file of :data:`CONFIG_DIR_ENV`, a task
    YAML, any other group file of ``conf/`` — is data (:func:`check_data_only`)."""
    conf = CONF_DIR.resolve()
    where = Path(os.path.abspath(path))
    return where == conf / "config.yaml" or (conf / "hydra") in where.parents


#: the keys Hydra's ``instantiate`` acts on (a node holding ``_target_`` is a call)
INSTANTIATE_KEYS = ("_target_", "_partial_", "_args_", "_recursive_", "_convert_")
#: the interpolation-bearing strings (``${...}``) of every data-only config file checked in
#: this process (:func:`check_data_only`): an environment variable that one of them reads is
#: recorded as written (:func:`written_values`)
UNTRUSTED_TEXTS: set[str] = set()


#: ``${oc.env:NAME…}`` (or ``${env:NAME}``) in a config value: the variable's name as written
_ENV_READ = re.compile(r"\$\{\s*(?:oc\.env|env)\s*:\s*([^,}]*)")


def _refuse_secret_reads(where: str, key: str, value: str) -> None:
    """A config file never reads a secret's value (issue 43): ``${oc.env:NAME}`` of a variable
    named like a secret (:func:`evalkit.secrets.is_secret_key`: ``OPENAI_API_KEY``, ``HF_TOKEN``)
    or of a name that is itself computed (``${oc.env:${…}}``) is refused, since a prompt or an
    endpoint holding it would send the key (reversed, cut or upper-cased, no scrubbing finds it).
    A model names its key's variable instead (``model.api_key_env``).

    Raises:
        ConfigError: one line naming the file, the key and the variable."""
    for name in _ENV_READ.findall(value):
        name = name.strip()
        if "$" in name or secrets.is_secret_key(name):
            raise ConfigError(f"{where}: {printable(key or '(top)', 200)}: ${{oc.env:{printable(name, 80)}}} reads "
                              f"{'a variable whose name is computed' if '$' in name else 'a variable named like a secret'}; "
                              "a config file never reads a key's value (a model names its key's variable with "
                              "model.api_key_env; README, Trust)")  # fmt: skip


def check_data_only(path: Path, group: str, text: str, node: Any) -> None:
    """A config file of :data:`CONFIG_DIR_ENV`, a task YAML or any group file of evalkit's
    ``conf/`` but Hydra's own (:func:`hydra_own`) is data, not code: it may set its group's
    keys and name other configs, never reach Hydra's machinery. ``text``: the file's text
    (its header, as Hydra reads it); ``node``: PyYAML's composed node graph of it (``None``:
    not YAML, which Hydra refuses next), walked whole (aliases and merge keys included).
    Refused:

    * a ``# @package`` header other than the file's own group (``group`` dotted, or
      ``_global_.group``): ``_global_`` or ``hydra`` would move its keys to the root or into
      Hydra's settings;
    * a ``hydra`` key (or ``hydra.*``) at the top;
    * a key of :data:`INSTANTIATE_KEYS` at any depth (``_target_`` names a callable Hydra calls);
    * ``${oc.env:NAME}`` of a variable named like a secret (:func:`_refuse_secret_reads`);
    * a ``defaults`` entry that names a ``hydra/…`` group (``override hydra/…`` too), puts a
      config into the root package (``@_global_``) or into ``hydra``, or holds an
      interpolation (``${...}``: the option it picks is not known before Hydra composes, so
      no check would read its file).

    Its interpolation-bearing strings are remembered (:data:`UNTRUSTED_TEXTS`): an
    environment variable they read is recorded as written (:func:`written_values`).

    Raises:
        ConfigError: one line naming the file and the key.
    """
    from hydra.plugins.config_source import ConfigSource
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    where = printable(str(path))
    own = group.replace("/", ".")
    try:
        package = ConfigSource._get_header_dict(text).get("package")  # Hydra's own reading of the header
    except ValueError as exc:
        raise ConfigError(f"{where}: its header cannot be read ({printable(str(exc), 200)})") from None
    if package is not None and package not in {own, f"_global_.{own}"}:  # (Hydra 1.3 takes _group_ as a literal key)
        raise ConfigError(f"{where}: # @package {printable(package, 100)}: a config file stays in its group's package "
                          f"({own or 'the root'}); _global_ would move its keys to the root, hydra into Hydra's settings "
                          f"(a config file is data, not code: README, Trust)")  # fmt: skip
    if node is None:
        return
    seen: set[tuple[int, str]] = set()  # an alias's target is walked at each place it is used (load_yaml bounded that size)
    stack: list[tuple[Any, str]] = [(node, "")]
    while stack:
        current, key = stack.pop()
        if (id(current), key) in seen:
            continue
        seen.add((id(current), key))
        if isinstance(current, ScalarNode):
            if "${" in current.value:
                _refuse_secret_reads(where, key, current.value)
                UNTRUSTED_TEXTS.add(current.value)
        elif isinstance(current, SequenceNode):
            stack += [(child, f"{key}.{i}" if key else str(i)) for i, child in reversed(list(enumerate(current.value)))]
        elif isinstance(current, MappingNode):
            children: list[tuple[Any, str]] = []
            for k, v in current.value:  # in the file's order: the first key refused is named
                name = k.value if isinstance(k, ScalarNode) else "?"
                full = f"{key}.{name}" if key else str(name)
                if name in INSTANTIATE_KEYS:
                    raise ConfigError(f"{where}: {printable(full, 200)}: {name} is Hydra's instantiate key (a call); a config file "
                                      f"names no callable (a config file is data, not code: README, Trust)")  # fmt: skip
                if not key and (name == "hydra" or str(name).startswith("hydra.")):
                    raise ConfigError(f"{where}: {printable(full, 200)}: a config file sets no hydra key (Hydra's own settings, "
                                      f"whose callbacks are code, are evalkit's conf/config.yaml; README, Trust)")  # fmt: skip
                if not key and name == "defaults" and isinstance(v, SequenceNode):
                    for i, entry in enumerate(v.value):
                        _check_default(where, i, entry)
                if name == "<<":  # a merge key: the merged mappings' keys are this mapping's own
                    children += [(m, key) for m in (v.value if isinstance(v, SequenceNode) else [v])]
                else:
                    children += [(k, full), (v, full)]
            stack += reversed(children)


def _check_default(where: str, index: int, entry: Any) -> None:
    """One entry of a data-only file's ``defaults`` list (:func:`check_data_only`): a string
    (``name``, ``/name``, ``group/name``, with ``@package``) or a one-key mapping
    (``[override|optional] [/]group[@package]: option`` or a list of options).

    Raises:
        ConfigError: naming the file and the entry.
    """
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    if isinstance(entry, ScalarNode):
        path, options = entry.value, []
    elif isinstance(entry, MappingNode) and len(entry.value) == 1 and isinstance(entry.value[0][0], ScalarNode):
        key, value = entry.value[0]
        path = key.value
        values = value.value if isinstance(value, SequenceNode) else [value]
        options = [v.value for v in values if isinstance(v, ScalarNode)]
    else:
        return  # not an entry Hydra's defaults list takes: Hydra refuses it
    shown = printable(path if not options else f"{path}: {', '.join(options)}", 200)
    what = f"{where}: defaults.{index} ({shown})"
    if any("${" in text for text in (path, *options)):
        raise ConfigError(f"{what}: an interpolation in a defaults entry of a config file (the config it picks would be read "
                          f"unchecked); name the option")  # fmt: skip
    words = path.split()
    group, _, package = (words[-1] if words else "").partition("@")
    if group.lstrip("/").split("/")[0] == "hydra":
        raise ConfigError(f"{what}: a config file picks no hydra group (Hydra's own settings, whose callbacks and launchers "
                          f"are code, are evalkit's conf/; README, Trust)")  # fmt: skip
    for part in package.split(":") if package else []:
        inside = part.split(".")
        if part == "_global_" or (inside[1:2] if inside[0] == "_global_" else inside[:1]) == ["hydra"]:
            raise ConfigError(f"{what}: @{printable(part, 100)}: a config file puts no config into the root package or into "
                              f"Hydra's settings (a config file is data, not code: README, Trust)")  # fmt: skip
        if inside[0] == "_global_" and inside[1:] != group.lstrip("/").split("/"):  # /backend@_global_.backend: its own place
            raise ConfigError(f"{what}: @{printable(part, 100)}: a config file puts a {printable(group.lstrip('/'), 60)} config "
                              f"only at its own place (@_global_.{printable(group.lstrip('/').replace('/', '.'), 60)}), never "
                              f"into another group's keys (README, Trust)")  # fmt: skip


def override_choices(overrides: Sequence[str]) -> dict[str, set[str]]:
    """The options each ``group=option`` override names, per group (each of a sweep's
    ``a,b`` or ``[a,b]``; ``judge=`` names ``model`` configs)."""
    named: dict[str, set[str]] = {}
    for arg in overrides:
        m = _GROUP_CHOICE.match(str(arg))
        if m:
            options = {v.strip().strip("'\"") for v in m.group(2).strip("[]").split(",") if v.strip()}
            named.setdefault("model" if m.group(1) == "judge" else m.group(1), set()).update(options)
    return named


def defaults_named(path: Path, group: str) -> list[tuple[str, str]]:
    """``(group, option)`` of each entry of the ``defaults`` list of ``path`` (a config of
    ``group``; already checked by :func:`evalkit.untrusted.check_yaml_file`), as Hydra's defaults
    list reads them: ``[override|optional] [/]group[@package]: option`` (an option or a list
    of them; a group without ``/`` is relative to ``group``) and a plain ``name[@package]`` (a
    config of ``group``; ``/name``: at the root); ``_self_``, ``null``, interpolations and
    Hydra's own groups are left out (:func:`check_data_only` refuses the last two in any file
    but evalkit's own Hydra settings). A
    file that is not YAML names nothing (Hydra's message names its error next)."""
    try:
        data = load_yaml(read_bytes(path, MAX_YAML_BYTES, what="a YAML file", error=ConfigError), str(path), ConfigError)
    except ConfigError:
        return []
    entries = data.get("defaults") if isinstance(data, dict) else None
    named = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, str):
            name = entry.partition("@")[0].strip()  # name@package: the file is name's
            key, _, option = name.rpartition("/")
            key, options = "/" if name.startswith("/") and not key else key, [option]  # /name: a config at the root
        elif isinstance(entry, dict) and len(entry) == 1:
            (key, value), = entry.items()
            options = value if isinstance(value, list) else [value]
        else:
            continue
        if not isinstance(key, str):
            continue
        key = " ".join(w for w in key.split() if w not in ("override", "optional")).partition("@")[0]
        if key.lstrip("/").split("/")[0] == "hydra":
            continue
        where = key[1:] if key.startswith("/") else "/".join(p for p in (group, key) if p)
        named += [(where, o) for o in options if isinstance(o, str) and o and o != "_self_" and "${" not in o]
    return named


def check_chosen(cfg: DictConfig, environ: Any = None) -> None:
    """Each option the run chooses — Hydra's own answer, ``hydra.runtime.choices`` of a
    config composed with ``return_hydra_config=True`` (chosen by an override, by
    ``conf/config.yaml``'s defaults or by a chosen config's own ``defaults``, as
    ``conf/model/reference.yaml`` picks ``backend: offline``), and each ``judge=`` model
    config — defined in one place only.

    Raises:
        ConfigError: a chosen option defined in two of ``conf/`` and the directories of
            :data:`CONFIG_DIR_ENV` (one line naming both files: Hydra would silently take the
            first, the shipped one over a team's).
    """
    dirs = [CONF_DIR, *config_dirs(environ)]
    chosen: list[tuple[str, Any]] = [(g, o) for g, o in (cfg.hydra.runtime.choices or {}).items() if not g.startswith("hydra/")]
    judges = cfg.get("judge")
    chosen += [("model", j) for j in ([judges] if isinstance(judges, str) else list(judges or []))]
    for group, options in chosen:
        for option in [options] if isinstance(options, str) else list(options or []):
            found = [d / group / f"{option}.yaml" for d in dirs if os.path.lexists(d / group / f"{option}.yaml")]
            if len(found) > 1:
                raise ConfigError(f"{group}={option}: defined twice, in {found[0]} and in {found[1]}; rename one (a config "
                                  f"of {CONFIG_DIR_ENV} never silently replaces or hides another)")  # fmt: skip


def without_hydra(cfg: DictConfig) -> DictConfig:
    """``cfg`` without its ``hydra`` node (what Hydra's compose returns unless asked for it)."""
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    return cfg


def check_config_files(overrides: Sequence[str], environ: Any = None) -> None:
    """Every file of :func:`config_files` composed by the bounded YAML loader
    (:func:`evalkit.untrusted.load_yaml`: alias count, depth, size and expanded size) before
    Hydra's OmegaConf reads it: a task file that is an alias bomb ("billion laughs") is one
    line, not a hang — a file a chosen config's own ``defaults`` picks too.

    Raises:
        ConfigError: a file over a bound, not a regular file or unreadable — one line naming it.
    """
    config_files(overrides, environ)


def config_dirs(environ: Any = None) -> list[Path]:
    """The user's config directories named by :data:`CONFIG_DIR_ENV`, resolved, in order
    (those that exist; :func:`search_path_overrides` refuses a missing one)."""
    environ = os.environ if environ is None else environ
    dirs = [Path(d).expanduser().resolve() for d in str(environ.get(CONFIG_DIR_ENV) or "").split(os.pathsep) if d]
    return [d for d in dirs if d.is_dir()]


def option_file(group: str, option: str) -> Path | None:
    """The YAML file Hydra takes ``group=option`` from: ``conf/<group>/<option>.yaml``, else
    the first :data:`CONFIG_DIR_ENV` directory's (Hydra's search path order); ``None`` for
    an option without a file (an entry point's)."""
    for d in (CONF_DIR, *config_dirs()):
        path = d / group / f"{option}.yaml"
        if path.is_file():
            return path
    return None


def benchmark_file(cfg: DictConfig | dict[str, Any]) -> Path | None:
    """The YAML file of the composed config's benchmark: the option Hydra chose (inside the
    running app: ``hydra.runtime.choices``), else the one named as the benchmark."""
    option = None
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            option = HydraConfig.get().runtime.choices.get("benchmark")
    except Exception:  # noqa: BLE001 - no running app: the name
        option = None
    bench = cfg.get("benchmark") if hasattr(cfg, "get") else None
    name = bench.get("name") if hasattr(bench, "get") else None
    for candidate in dict.fromkeys(c for c in (option, name) if c):
        path = option_file("benchmark", str(candidate))
        if path is not None:
            return path
    return None


def source_file(raw: dict[str, Any], key: str) -> Path | None:
    """The YAML file the config error at ``key`` comes from: the benchmark's for
    ``benchmark.*``, the model config's for ``model.*``, ``user.model.*`` and
    ``judge.<i>.model.*`` (``conf/model/<name>.yaml`` or :data:`CONFIG_DIR_ENV`'s); ``None``
    for any other key or a config not read from a file."""
    parts = key.split(".")
    if parts[0] == "benchmark":
        return benchmark_file(raw)
    if parts[0] == "backend" and len(parts) == 2:
        return backend_file(parts[1])
    node: Any = None
    if parts[0] == "model":
        node = raw.get("model")
    elif parts[0] == "user" and len(parts) > 1 and parts[1] == "model":
        node = (raw.get("user") or {}).get("model")
    elif parts[0] == "judge" and len(parts) > 2 and parts[1].isdigit() and parts[2] == "model":
        judges = raw.get("judge") or []
        node = judges[int(parts[1])].get("model") if int(parts[1]) < len(judges) and isinstance(judges[int(parts[1])], dict) else None
    name = node.get("name") if isinstance(node, dict) else None
    return option_file("model", str(name)) if isinstance(name, str) and name else None


def backend_file(key: str) -> Path | None:
    """The YAML file of the ``backend`` option that holds ``key`` at its top level (issue 47:
    ``backend.concurency: unknown key`` named no file): the option Hydra chose inside the
    running app, else the one backend file of ``conf/`` and :data:`CONFIG_DIR_ENV` that holds
    it (``None`` when none or several do: the key came from the command line or a model's
    config). Files are read as data (:func:`~evalkit.untrusted.load_yaml`), never executed."""
    try:
        from hydra.core.hydra_config import HydraConfig

        chosen = HydraConfig.get().runtime.choices.get("backend") if HydraConfig.initialized() else None
    except Exception:  # noqa: BLE001 - no running app
        chosen = None
    candidates = [option_file("backend", str(chosen))] if chosen else [
        p for d in (CONF_DIR, *config_dirs()) for p in sorted((d / "backend").glob("*.yaml"))]  # fmt: skip
    holding = []
    for path in (p for p in candidates if p is not None):
        try:
            doc = load_yaml(read_bytes(path, MAX_YAML_BYTES, what="a backend config", error=ConfigError), str(path), ConfigError)
        except ConfigError:
            continue
        if isinstance(doc, dict) and key in doc:
            holding.append(path)
    return holding[0] if len(holding) == 1 else None


def in_file(exc: ConfigError, path: Path | None) -> ConfigError:
    """``exc`` with the file its key comes from appended (``(file <path>)``), when known."""
    return ConfigError(f"{exc} (file {path})") if path is not None else exc


def register_entry_points() -> list[str]:
    """Make every benchmark installed through an entry point a ``benchmark`` option of its
    own, ``{name: <entry point>}`` in Hydra's ConfigStore: ``benchmark=<name>`` then needs no
    YAML (the benchmark's settings' defaults apply), and ``--help`` and "unknown benchmark"
    list it. An entry point with a YAML of its name in ``conf/`` or :data:`CONFIG_DIR_ENV` is
    not registered (the YAML is the option). Returns the entry points' names."""
    from hydra.core.config_store import ConfigStore

    names = entry_point_names()
    store = ConfigStore.instance()
    for name in names:
        if option_file("benchmark", name) is not None:
            # a YAML of that name is the option: no ConfigStore node beside it (Hydra would
            # match the YAML against it as a schema, with a deprecation warning)
            store.repo.get("benchmark", {}).pop(f"{name}.yaml", None)
            continue
        store.store(group="benchmark", name=name, node={"name": name}, provider="evalkit entry point")
    return names


def help_additions(environ: Any = None) -> str:
    """The part of ``python -m evalkit --help`` that says what the user's config directories
    (:data:`CONFIG_DIR_ENV`: each group's ``*.yaml``, by directory) and the installed entry
    points add (Hydra's own listing shows only ``conf/``'s and the entry points' options);
    ``""`` when neither adds anything."""
    lines = []
    for d in config_dirs(environ):
        groups = {g.name: sorted(p.stem for p in g.glob("*.yaml")) for g in sorted(d.iterdir()) if g.is_dir()}
        shown = [f"  {group}: {', '.join(opts)}" for group, opts in groups.items() if opts]
        if shown:
            lines += [f"{CONFIG_DIR_ENV} {d}:", *shown]
    eps = entry_point_names()
    if eps:
        lines += ["Installed entry points (group evalkit.benchmarks; no YAML needed):", f"  benchmark: {', '.join(eps)}"]
    return "\n".join(["== Added by your config directory and installed packages ==", *lines, ""]) if lines else ""


#: the first line of Hydra's default help footer (``hydra/help/default.yaml``)
HYDRA_FOOTER = "Powered by Hydra (https://hydra.cc)"


def help_text(hydra_help: str, additions: str) -> str:
    """``python -m evalkit --help``: Hydra's help (``hydra_help``) with ``additions``
    (:func:`help_additions`) put before Hydra's footer (``Powered by Hydra …``, which stays
    last), or at the end when the footer is not there."""
    if not additions:
        return hydra_help
    at = hydra_help.rfind(HYDRA_FOOTER)
    if at < 0:
        return hydra_help.rstrip("\n") + "\n\n" + additions
    return hydra_help[:at] + additions.rstrip("\n") + "\n\n" + hydra_help[at:]


def hydra_error_line(exc: BaseException) -> str:
    """A one-line version of a Hydra/OmegaConf composition error. An unknown group option
    lists the options of every place on the search path (``conf/``, :data:`CONFIG_DIR_ENV`,
    entry points) and, when one is close, ``did you mean X?`` (:func:`difflib.get_close_matches`)."""
    import difflib

    text = str(exc).strip()
    m = re.search(r"Could not find '([^']+)/([^'/]+)'", text)
    if m:
        group, option = m.groups()
        opts = re.findall(r"^\t(\S+)$", text, flags=re.M)
        near = difflib.get_close_matches(option, opts, n=1, cutoff=0.6)
        hint = f"; did you mean {group}={near[0]}?" if near else ""
        avail = f"; available: {', '.join(opts)}" if opts else ""
        return f"{group}={option}: unknown {group}{hint}{avail}"
    m = re.search(r"Could not override '([^']+)'", text)
    if m and ("not in struct" in text or "To append" in text):
        near = similar_key(m.group(1))
        if near == m.group(1).lstrip("+~"):  # a field of the validated config that this config's YAML does not set
            return f"{near}: not set by this config's YAML; add it with +{near}=..."
        if near:
            return f"{m.group(1)}: unknown key; did you mean {near}?"
        return f"{m.group(1)}: unknown key (to add a new key use +{m.group(1)}=...)"
    m = re.search(r"Could not append to config\. An item is already at '([^']+)'", text)
    if m:
        return f"{m.group(1)}: already exists; override it without '+'"
    m = re.search(r"Missing mandatory value: (\S+)", text)
    if m:
        return f"{m.group(1)}: required value missing (pass {m.group(1)}=...)"
    m = re.search(r"Error parsing override '([^']+)'", text)
    if m:
        return f"override {m.group(1)!r} is not valid override syntax (expected key=value)"
    m = re.search(r'in "([^"]+)", line (\d+), column (\d+)\n(.+?)\n\s+in "[^"]+", line (\d+), column (\d+)', text)
    if m:  # a YAML syntax error (yaml's MarkedYAMLError): where it is and what was expected
        return f"{m.group(1)}: line {m.group(5)}, column {m.group(6)}: {m.group(4)} (YAML syntax; the construct began at line {m.group(2)})"
    m = re.match(r'(.+?)\n\s+in "([^"]+)", line (\d+), column (\d+)', text)
    if m:  # a YAML syntax error with one mark
        return f"{m.group(2)}: line {m.group(3)}, column {m.group(4)}: {m.group(1)} (YAML syntax)"
    first = text.splitlines()[0] if text else type(exc).__name__
    return first


def similar_key(key: str) -> str | None:
    """The known key closest to a mistyped ``group.key`` (``run.limt`` → ``run.limit``), by
    :func:`difflib.get_close_matches` over the fields of the group's settings model; ``None``
    when none is close or the group is not one of the validated ones."""
    import difflib

    group, _, leaf = key.partition(".")
    models = {"run": (config.RunSettings,), "model": (config.ModelConfig,), "runner": (config.RunnerConfig,),
              "tracking": (config.TrackingConfig,), "shots": (config.ShotsConfig,),
              "backend": (config.ApiBackend, config.LlamaCppBackend, config.OfflineBackend)}  # fmt: skip
    if group not in models or not leaf or "." in leaf:
        return None
    known = sorted({name for model in models[group] for name in model.model_fields})
    near = difflib.get_close_matches(leaf, known, n=1, cutoff=0.75)
    return f"{group}.{near[0]}" if near else None


_NUMERIC_GROUP = re.compile(r"^(shots)=(-?\d+(?:,-?\d+)*)$")


def quote_numeric_groups(args: Sequence[str]) -> list[str]:
    """``shots=3`` → ``shots='3'`` and ``shots=0,3`` → ``shots='0','3'``; ``shots=N`` for an
    N without a ``shots/N.yaml`` (in ``conf/`` or :data:`CONFIG_DIR_ENV`) → ``shots.n=N``.

    The ``shots`` group's options are named by numbers; Hydra's override grammar would read
    ``3`` as an int and refuse it as a group choice, so the number is quoted for it. Any
    other count sets ``shots.n`` (the group's one key) on the default option: ``shots=2``
    works like ``shots.n=2`` (it was refused "available: 0, 3", issue 32).
    """
    options = {p.stem for d in (CONF_DIR, *config_dirs()) for p in (d / "shots").glob("*.yaml")}
    out = []
    for arg in args:
        m = _NUMERIC_GROUP.match(arg)
        if m and not set(m.group(2).split(",")) <= options:
            out.append(f"{m.group(1)}.n={m.group(2)}")
        else:
            out.append(f"{m.group(1)}=" + ",".join(f"'{n}'" for n in m.group(2).split(",")) if m else arg)
    return out


#: ``model.vision`` too: a model config rarely holds it, and the refusal of a text-only model says to set it
_BENCHMARK_KEY = re.compile(r"^(benchmark\.[A-Za-z_]|model\.vision=)")


def benchmark_keys_addable(args: Sequence[str]) -> list[str]:
    """``benchmark.first_k=5`` → ``++benchmark.first_k=5`` (add or override).

    A benchmark's settings and their defaults are declared once, in its pydantic settings
    model; its YAML holds only what differs from them. Hydra refuses to override a key the
    YAML does not hold, so a ``benchmark.<key>`` override may add it; pydantic then refuses
    a key the settings model does not have (``benchmark.<key>: unknown key``, exit 2)."""
    return [f"++{a}" if _BENCHMARK_KEY.match(a) else a for a in args]


def compose(overrides: Sequence[str] = (), keep_hydra: bool = False) -> DictConfig:
    """Compose ``conf/config.yaml`` with ``overrides`` (Hydra's compose API); ``keep_hydra``:
    with its ``hydra`` node (``runtime.choices``, ``overrides.task``: what
    :class:`hydra.core.hydra_config.HydraConfig` is set from for a run of the command line).

    Raises:
        ConfigError: any composition error, as one line.
    """
    check_config_files(overrides)
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    register_entry_points()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            args = benchmark_keys_addable(quote_numeric_groups(overrides)) + search_path_overrides()
            cfg = hydra_compose("config", overrides=args, return_hydra_config=True)
    except Exception as exc:  # noqa: BLE001 - hydra raises many types; all become one line
        raise ConfigError(composition_error(overrides, exc)) from None
    check_chosen(cfg)
    return cfg if keep_hydra else without_hydra(cfg)


def composition_error(overrides: Sequence[str], exc: BaseException) -> str:
    """The one line of a composition error of ``overrides`` (:func:`bad_override` for one the
    grammar rejected, else :func:`hydra_error_line`), never with a secret: the value of any
    secret-looking ``key=value`` quoted (``judge_overrides=['backend.api_key=…']`` too) and
    the overrides' secret values are scrubbed (:func:`evalkit.secrets.redact_line`)."""
    line = bad_override(overrides, exc) if type(exc).__name__ == "OverrideParseException" else hydra_error_line(exc)
    return secrets.redact_line(line, overrides)


def bad_override(overrides: Sequence[str], exc: BaseException) -> str:
    """Name the override Hydra's grammar rejected (secrets not yet redacted: see
    :func:`composition_error`)."""
    parser = OverridesParser.create()
    for ov in overrides:
        try:
            parser.parse_overrides([ov])
        except Exception as inner:  # noqa: BLE001
            reason = str(inner).splitlines()[0]
            return f"override {ov!r} cannot be parsed ({reason}); expected key=value"
    return str(exc).splitlines()[0]


def to_plain(cfg: DictConfig) -> dict[str, Any]:
    """Resolved plain dict of a composed config without the ``hydra`` node.

    Raises:
        ConfigError: a missing mandatory value (``???``) or a failing interpolation.
    """
    cfg = cfg.copy()
    OmegaConf.set_struct(cfg, False)
    cfg.pop("hydra", None)
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        if "Missing mandatory value" in str(exc) and key:
            raise ConfigError(f"{key}: required value missing (pass {key}=...)") from None
        raise ConfigError(f"{key or 'config'}: {str(exc).splitlines()[0]}") from None


def written_values(cfg: DictConfig) -> dict[tuple[str, str, Any], str]:
    """What the record of ``cfg`` (a composed config) writes as written: ``{(key name, type
    name, resolved value): text as written}`` of each value whose resolution reads the
    environment (``${oc.env:NAME}``, OmegaConf's one resolver that does; directly or through
    the node it refers to) by an interpolation written in a data-only config file
    (:data:`UNTRUSTED_TEXTS`: a file of :data:`CONFIG_DIR_ENV`, a task YAML) or that such a
    file's interpolation resolves. The
    values sent are the resolved ones; ``config.yaml``, the MLflow params and artifacts and
    the report show the text (:meth:`evalkit.config.EvalConfig.as_written`). An
    interpolation of evalkit's own ``conf/config.yaml`` (``run.suite``) or of the command
    line is the user's and resolves as before. A value so read from a variable whose name
    looks secret (``OPENAI_API_KEY``: :func:`evalkit.secrets.is_secret_key`) is registered as
    a secret too: scrubbed wherever it would be written (a prompt in a trace).

    Each such value is resolved once more with ``oc.env`` watched (OmegaConf's own resolver
    is registered again after); an interpolation that fails is left out (:func:`to_plain`
    named it first).
    """
    from omegaconf import ListConfig
    from omegaconf.resolvers import oc

    if not UNTRUSTED_TEXTS:
        return {}
    reads: list[tuple[str, Any, Any]] = []

    def watched(key: str, *default: Any, _node_: Any = None) -> Any:
        value = oc.env(key, *default)
        reads.append((key, value, _node_))
        return value

    def untrusted(text: Any) -> bool:
        return isinstance(text, str) and "${" in text and any(text in u for u in UNTRUSTED_TEXTS)

    written: dict[tuple[str, str, Any], str] = {}

    def visit(node: Any, name: str | None) -> None:
        keys = range(len(node)) if isinstance(node, ListConfig) else [k for k in node.keys() if name is not None or k != "hydra"]
        for key in keys:
            child = node._get_node(key)
            here = name if isinstance(node, ListConfig) else str(key)
            raw = child._value() if child is not None else None
            if isinstance(raw, str) and "${" in raw:
                reads.clear()
                try:
                    value = node[key]
                except Exception:  # noqa: BLE001 - to_plain named the failing interpolation first
                    continue
                tainted = [(var, v) for var, v, at in reads if untrusted(raw) or untrusted(getattr(at, "_value", lambda: None)())]
                for var, v in tainted:
                    if secrets.is_secret_key(var) and isinstance(v, str):
                        secrets.register(v)
                if tainted and here is not None and not isinstance(value, (DictConfig, ListConfig)):
                    written[(here, type(value).__name__, value)] = raw
            elif isinstance(child, (DictConfig, ListConfig)) and not child._is_none() and not child._is_missing():
                visit(child, here)

    OmegaConf.register_new_resolver("oc.env", watched, replace=True)
    try:
        visit(cfg, None)
    finally:
        OmegaConf.register_new_resolver("oc.env", oc.env, replace=True)  # OmegaConf's own (register_default_resolvers)
    return written


def _app_overrides() -> list[str] | None:
    """The overrides of the job Hydra's running app composed (``hydra.overrides.task``), or
    ``None`` outside a running app."""
    from hydra.core.hydra_config import HydraConfig

    return [str(o) for o in HydraConfig.get().overrides.task] if HydraConfig.initialized() else None


def _compose_in_context(overrides: list[str]) -> DictConfig:
    """Compose another config of the same tree, inside Hydra's running app if there is one.
    The user's config directories (:data:`CONFIG_DIR_ENV`) are on its search path there too:
    the running app's compose API does not carry the command line's ``hydra.searchpath``, so
    ``judge=<a model config of EVALKIT_CONFIG_DIR>`` was an unknown model (issue 32)."""
    if GlobalHydra.instance().is_initialized():
        check_config_files(overrides)
        try:
            cfg = hydra_compose("config", overrides=[*overrides, *search_path_overrides()], return_hydra_config=True)
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(composition_error(overrides, exc)) from None
        check_chosen(cfg)
        return without_hydra(cfg)
    return compose(overrides)


def resolve(cfg: DictConfig) -> tuple[dict[str, Any], EvalConfig]:
    """Plain resolved dict + validated :class:`~evalkit.config.EvalConfig` of a composed
    config. ``benchmark.user_model=<name>`` (after ``model.dataset_args`` is applied) is
    composed here: ``conf/model/<name>.yaml`` with ``benchmark.user_overrides`` and its own
    backend become the ``user`` node, validated and recorded like the agent model. A
    benchmark with a user simulator (a ``user_model`` setting) and no ``user_model`` set
    gets the model under test, as configured (its ``model`` and ``backend`` nodes), as the
    user of a litellm model: the README's ``model=gpt4o`` runs every ACEBench subset.
    ``judge=<name>`` (or a panel ``judge=[a,b]``) with ``judge_overrides`` becomes the
    ``judge`` list likewise (:func:`compose_judges`).

    Raises:
        ConfigError: one line naming the key.
    """
    given = _app_overrides()
    if given is not None:  # a job of Hydra's app (a sweep's may run in a process of its own): its files checked here too
        check_config_files(given)
    raw = to_plain(cfg)
    written = written_values(cfg)
    bench = resolve_layers(raw, get_benchmark_class)["benchmark"]
    user_name = bench.get("user_model")
    check_nested_overrides(bench.get("user_overrides"), "benchmark.user_overrides")
    if user_name:
        try:
            user_cfg = _compose_in_context([f"model={user_name}", *list(bench.get("user_overrides") or [])])
            user_raw = to_plain(user_cfg)
        except ConfigError as exc:
            raise ConfigError(f"benchmark.user_model: {exc}") from None
        written.update(written_values(user_cfg))
        raw["user"] = {"model": user_raw["model"], "backend": user_raw["backend"]}
    elif "user_model" in _settings_fields(bench) and (raw.get("model") or {}).get("kind", "litellm") == "litellm":
        if bench.get("user_overrides"):
            raise ConfigError(
                "benchmark.user_overrides: they apply to the config named by benchmark.user_model; name it too "
                "(without it the user simulator is the model under test, as configured)"
            )
        # the default user simulator: the model under test as configured (its model and backend nodes)
        raw["user"] = {"model": copy.deepcopy(raw["model"]), "backend": copy.deepcopy(raw["backend"])}
    raw["judge"] = compose_judges(raw.pop("judge", None), raw.pop("judge_overrides", None), written)
    try:
        validated = validate(raw, get_benchmark_class).with_written(written)
    except ConfigError as exc:
        if "environment variable" in str(exc):  # a key not set in the environment: no file holds it
            raise
        raise in_file(exc, source_file(raw, str(exc).partition(":")[0])) from None
    check_benchmark(validated, benchmark_file(raw))
    return raw, validated


def check_benchmark(cfg: EvalConfig, path: Path | None = None) -> None:
    """The benchmark's own pre-run checks (:meth:`~evalkit.benchmarks.base.Benchmark.check`:
    a YAML task checked against the rows ``cfg.run`` selects), before anything starts and whatever the
    model; an error names ``path`` (the benchmark's YAML file) when given.

    Raises:
        ConfigError / DataError: one line naming the key (and the file).
    """
    bench_cls = get_benchmark_class(cfg.benchmark.name, kind=getattr(cfg.benchmark, "kind", None))
    if bench_cls.check is Benchmark.check and bench_cls.sends_images is Benchmark.sends_images:
        return
    bench, selection = bench_cls(cfg.benchmark), selection_of(cfg.run)  # a sample-ids file's error is its own line
    try:
        bench.check(selection)  # only the rows the run selects are read and checked (issue 46)
    except (ConfigError, DataError) as exc:
        raise type(exc)(f"{exc} (file {path})" if path is not None else str(exc)) from None
    if bench.sends_images():
        check_images_taken(cfg)


def check_images_taken(cfg: EvalConfig) -> None:
    """A benchmark that sends images needs a model that takes them, asked through the chat API
    (offline models — reference, replay, baselines — send nothing and pass): ``model.vision``
    when set, else litellm's ``supports_vision`` only when it says True
    (:func:`evalkit.providers.takes_images`). evalkit's embedded llama.cpp server is
    text-only.

    Raises:
        ConfigError: one line saying which key to set.
    """
    model = cfg.model
    if model.kind != "litellm":
        return
    what = f"benchmark {cfg.benchmark.name} sends images (dataset.fields.images)"
    if model.api != "chat":
        raise ConfigError(f"model.api: {what}; images go through the chat API, not model.api={model.api}")
    if getattr(cfg.backend, "kind", None) == "llamacpp":
        raise ConfigError(f"backend: {what}; evalkit's embedded llama.cpp server is text-only (use backend=api with a vision model)")
    takes, why = takes_images(str(model.provider_model), model.vision)
    if not takes:
        raise ConfigError(f"model.vision: {what} but model {model.name} ({model.provider_model}) is not known to take them "
                          f"({why}); set model.vision=true if it does")  # fmt: skip


def compose_judges(names: Any, overrides: Any, written: dict[tuple[str, str, Any], str] | None = None) -> list[dict[str, Any]]:
    """The ``judge`` nodes of ``judge=<name>`` (or a panel ``judge=[a,b]``): each
    ``conf/model/<name>.yaml`` with ``judge_overrides`` (applied to every judge) and its own
    backend, composed like the user simulator (``{"model", "backend"}``). ``written``, when
    given, gets each judge config's values recorded as written (:func:`written_values`).

    Raises:
        ConfigError: a name that is not a model config, overrides without a judge, or
            values of the wrong shape — one line naming the key.
    """
    if names is None or names == []:
        if overrides:
            raise ConfigError("judge_overrides: they apply to the judge named by judge=<model config name>; name it too")
        return []
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError("judge: expected a model config name (judge=gpt4o) or a list of them (judge=[gpt4o,smollm2])")
    if overrides is not None and (not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides)):
        raise ConfigError("judge_overrides: expected a list of overrides (judge_overrides=['backend.api_base=...'])")
    check_nested_overrides(overrides, "judge_overrides")
    judges = []
    for name in names:
        try:
            judge_cfg = _compose_in_context([f"model={name}", *list(overrides or [])])
            judge_raw = to_plain(judge_cfg)
        except ConfigError as exc:
            raise ConfigError(f"judge: {exc}") from None
        if written is not None:
            written.update(written_values(judge_cfg))
        judges.append({"model": judge_raw["model"], "backend": judge_raw["backend"]})
    return judges


def check_nested_overrides(overrides: Any, key: str) -> None:
    """The overrides a config applies to another one it composes (``benchmark.user_overrides``,
    which a task file may hold, and ``judge_overrides``: ``key``) set that config's keys,
    never Hydra's own (``hydra.searchpath`` would read configs no check has read) nor a key
    of :data:`INSTANTIATE_KEYS`. Anything that is not a list of strings is left to the
    caller's own check.

    Raises:
        ConfigError: one line naming ``key`` and the override (secrets redacted).
    """
    for ov in overrides if isinstance(overrides, list) else []:
        if not isinstance(ov, str):
            continue
        parts = re.split(r"[./@\s]+", ov.lstrip("+~").partition("=")[0].strip())
        if parts[0] == "hydra" or any(k in ov for k in INSTANTIATE_KEYS):
            raise ConfigError(f"{key}: {printable(secrets.redact_line(ov, [ov]), 200)}: an override of a composed config sets "
                              f"its own keys, no hydra key and no callable (a config is data, not code: README, Trust)")  # fmt: skip


def _settings_fields(bench: dict[str, Any]) -> dict[str, Any]:
    """The settings fields of the benchmark ``bench`` names (none for an unknown one:
    validation then says so)."""
    try:
        return get_benchmark_class(str(bench.get("name"))).settings_model.model_fields
    except KeyError:
        return {}


def recorded_run_config(recorded: dict[str, Any]) -> EvalConfig:
    """The run's config from ``config.yaml`` (resolved, format 2), without the checks of a
    new run (credentials need not be set to read the data again).

    Raises:
        Exception: pydantic's, when the recorded config no longer validates.
    """
    bench = get_benchmark_class(str(recorded["benchmark"]["name"]), kind=recorded["benchmark"].get("kind")).settings_model(**recorded["benchmark"])
    return EvalConfig(**{**recorded, "benchmark": bench})


#: ``run.*`` keys of RUN that the judged run keeps (what was asked), unless given again; no
#: path read from RUN is used (``output_root``, ``cache_dir``, ``sample_ids_file``)
JUDGE_SELECTION = ("limit", "repeats", "seed", "sample_ids", "ci_level", "bootstrap_resamples")
#: override keys the command accepts (their first part); the rest of the config is RUN's
JUDGE_ACCEPTED = ("judge", "judge_overrides", "judge_qualification", "run", "tracking", "backend")


def judged_config(run: Path, recorded: dict[str, Any], overrides: Sequence[str],
                  tracking: dict[str, str] | None = None) -> EvalConfig:  # fmt: skip
    """The validated config of the run judging RUN's answers (``python -m evalkit.judge``:
    see :mod:`evalkit.judge`): RUN's benchmark and selection (``recorded``: its
    ``config.yaml``, read by the caller without following a link), ``model=replay
    model.path=RUN``, the judges and the overrides of :data:`JUDGE_JUDGE_ACCEPTED`.
    ``tracking``: ``tracking.*`` values the caller chose from RUN (:func:`evalkit.judge.judged_tracking`:
    its experiment, its store when RUN may name it), set as values — never composed, so no
    interpolation in them is resolved.

    Raises:
        RunDirError: the judged run's directory would be a link.
        ConfigError: an override outside :data:`JUDGE_JUDGE_ACCEPTED`, no judge, a benchmark without an
            ``llm_judge`` scorer, a place inside RUN, or any config error of the judged run — one line.
    """
    for ov in overrides:
        key = ov.lstrip("+~").partition("=")[0]
        if key.split(".")[0] not in JUDGE_ACCEPTED or "=" not in ov:
            shown = printable(secrets.redact_line(ov, [ov]), 200)
            raise ConfigError(f"{shown}: evalkit.judge takes judge=, judge_overrides=, judge_qualification.*, run.*, tracking and backend.* "
                              "overrides; what was asked (benchmark, model, shots, generation) comes from RUN")  # fmt: skip
    bench = recorded.get("benchmark") if isinstance(recorded.get("benchmark"), dict) else {}
    bench = {k: v for k, v in bench.items() if k != "module"}  # a run directory never makes evalkit import a module
    scorers = bench.get("scorers") if isinstance(bench.get("scorers"), list) else []
    if not any(isinstance(sc, dict) and sc.get("kind") == "llm_judge" for sc in scorers):
        raise ConfigError(f"{printable(str(run), 300)}: its benchmark {printable(bench.get('name'), 100)} has no llm_judge scorer; "
                          "nothing to judge")  # fmt: skip
    composed = compose(["model=replay", f"model.path={run}", *overrides])
    OmegaConf.set_struct(composed, False)
    composed.pop("benchmark")
    raw = to_plain(composed)
    if not raw.get("judge"):
        raise ConfigError("judge: name the judge: python -m evalkit.judge RUN judge=<model config name> (or a panel judge=[a,b])")
    written = written_values(composed)
    raw["judge"] = compose_judges(raw.pop("judge"), raw.pop("judge_overrides", None), written)
    names = [re.sub(r"[^A-Za-z0-9._-]", "_", str(j["model"].get("name"))) for j in raw["judge"]]  # a directory name's part
    raw["benchmark"], raw["shots"] = bench, recorded.get("shots") or raw.get("shots")
    if tracking and isinstance(raw.get("tracking"), dict):
        raw["tracking"].update(tracking)
    given = {ov.lstrip("+~").partition("=")[0] for ov in overrides}
    was = recorded.get("run") if isinstance(recorded.get("run"), dict) else {}
    raw["run"].update({k: was[k] for k in JUDGE_SELECTION if k in was and f"run.{k}" not in given})
    if was.get("sample_ids_file") and "run.sample_ids_file" not in given and "run.sample_ids" not in given:
        raise ConfigError(f"{printable(str(run), 300)}: its samples were chosen by run.sample_ids_file; give it again "
                          "(run.sample_ids_file=FILE): a path read from a run directory is not followed")  # fmt: skip
    if "run.dir" not in given and "run.resume" not in given:
        target = run.parent / f"{run.name}.judged-{'+'.join(names)}"
        if target.is_symlink():
            raise RunDirError(f"{printable(str(target), 300)}: a symbolic link; evalkit never writes through links (remove it)")
        raw["run"]["resume" if target.exists() else "dir"] = str(target)
    cfg = validate(raw, get_benchmark_class).with_written(written)
    check_benchmark(cfg, run / "config.yaml")  # the task checked before anything starts
    _refuse_writes_into(run, cfg)
    return cfg


def _refuse_writes_into(run: Path, cfg: EvalConfig) -> None:
    """RUN is read, never written: a ConfigError when the judged run's directory, output root,
    cache or MLflow store (a local path, ``sqlite:///`` or ``file:`` URI) is RUN or inside it
    (``run.resume=RUN`` would append to RUN's own journal and replace its summary)."""
    inside = run.resolve()
    places = {"run.dir": cfg.run.dir, "run.resume": cfg.run.resume, "run.output_root": cfg.run.output_root,
              "run.cache_dir": cfg.run.cache_dir, "tracking.tracking_uri": cfg.tracking.tracking_uri,
              "tracking.artifact_root": cfg.tracking.artifact_root}  # fmt: skip
    for key, value in places.items():
        if not value:
            continue
        local = re.sub(r"^(sqlite:///|file://)", "", str(value))
        if "://" in local:
            continue  # a remote store
        where = Path(local).resolve()
        if where == inside or inside in where.parents:
            raise ConfigError(f"{key}={printable(str(value), 300)}: inside the run judged; evalkit.judge never writes into RUN "
                              "(run it from another directory or name another place)")  # fmt: skip
