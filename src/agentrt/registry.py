"""Components by name: one mechanism for policies, schedulers and routers.

A `Registry` holds the components of one kind, merged on every look-up from three sources (a
later one replaces an earlier one of the same name): the built-ins (classes, loaded lazily on the
first look-up), plugins (the entry points of `group` in installed packages, loaded once, lazily:
a plugin that fails to load, or is no component of the kind, is skipped with a warning naming
its package, and may not take a built-in's or a reserved name), and `register(name, factory)`
calls. Every kind is described, listed and configured the same way:
- options are the keyword parameters of the component's constructor (following `**options` up
  its class hierarchy, `seed` aside: runs set it); `check_options` refuses an unknown option
  naming the valid ones, and a boolean option anything but a bool, before anything is built;
- `make(name, **options)` builds one, turning a bad value into one `AgentrtError` that names the
  kind, the component and the option;
- one option syntax serves every kind on the command line: `--set NAME.OPTION=VALUE` for a
  policy, `--set scheduler.OPTION=VALUE` and `--set router.OPTION=VALUE` for the run's scheduler
  and router (`options.parse_set`).
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from collections.abc import Callable, Iterable

from agentrt.errors import AgentrtError, unknown_name

Entry = tuple[Callable, str]          # (factory, description)


class PluginWarning(UserWarning):
    """A plugin (an entry point of a component group) that was skipped, and why."""


def class_parameters(cls: type) -> list[inspect.Parameter] | None:
    """The keyword parameters `cls`'s constructors take, `seed` aside, in signature order
    (following `**options` up the class hierarchy); None when options go on to no class."""
    params: list[inspect.Parameter] = []
    seen: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        forwards = False
        for p in list(inspect.signature(init).parameters.values())[1:]:
            if p.kind is p.VAR_KEYWORD:
                forwards = True     # e.g. PBKV-TA passes its options on to PBKV
            elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in seen:
                seen.add(p.name)
                params.append(p)
        if not forwards:
            return [p for p in params if p.name != "seed"]
    return None


class Registry:
    def __init__(self, kind: str, builtins: Callable[[], Iterable[type]], base: type,
                 group: str | None = None, reserved: Callable[[], Iterable[str]] = tuple,
                 warning: type[Warning] = PluginWarning) -> None:
        """`builtins` returns the built-in classes (each with `name` and `description`), `base`
        is the class a plugin class must derive from, `group` the entry-point group of plugins
        (None: none), `reserved` the names no plugin or registration may take."""
        self.kind = kind
        self._builtins_of = builtins
        self.base = base
        self.group = group
        self._reserved = reserved
        self.warning = warning
        self._builtin: dict[str, Entry] = {}
        self._plugins: dict[str, Entry] = {}
        self.plugin_sources: dict[str, str] = {}
        self.registered: dict[str, Entry] = {}
        self._loaded = {"builtin": False, "plugins": False}

    # ------------------------------------------------------------------ the table
    def _ensure_builtin(self) -> None:
        if not self._loaded["builtin"]:
            self._loaded["builtin"] = True
            for cls in self._builtins_of():
                self._builtin[cls.name] = (cls, cls.description)

    def _entry(self, obj) -> Entry | None:
        if isinstance(obj, type):
            return (obj, obj.description) if issubclass(obj, self.base) else None
        if not callable(obj):
            return None
        doc = (getattr(obj, "__doc__", None) or "").strip().splitlines()
        return obj, getattr(obj, "description", None) or (doc[0] if doc else "")

    def _skip(self, name: str, source: str, why: str) -> None:
        warnings.warn(f"agentrt: {self.kind} plugin '{name}' from {source} skipped: {why}",
                      self.warning, stacklevel=4)

    def _load_plugins(self) -> None:
        if self._loaded["plugins"] or self.group is None:
            return
        self._loaded["plugins"] = True
        from importlib.metadata import entry_points
        reserved = set(self._reserved())
        for ep in entry_points(group=self.group):
            dist = getattr(getattr(ep, "dist", None), "name", None)
            source = f"package '{dist}' ({ep.value})" if dist else f"'{ep.value}'"
            if ep.name in self._plugins:
                if self.plugin_sources[ep.name] != source:
                    self._skip(ep.name, source, f"the name is taken by {self.plugin_sources[ep.name]}")
                continue
            if ep.name in self._builtin or ep.name in reserved:
                self._skip(ep.name, source, f"the name is a built-in {self.kind}'s or a reserved one")
                continue
            try:
                obj = ep.load()
            except Exception as e:  # noqa: BLE001 - a broken plugin must not break agentrt
                self._skip(ep.name, source, f"it failed to load: {type(e).__name__}: {e}")
                continue
            entry = self._entry(obj)
            if entry is None:
                self._skip(ep.name, source, f"{ep.value} is not a {self.base.__name__} subclass or a "
                                            f"factory of them")
                continue
            self._plugins[ep.name] = entry
            self.plugin_sources[ep.name] = source

    def reload_plugins(self) -> None:
        """Forget the plugins found so far: the next look-up discovers the entry points again."""
        self._plugins.clear()
        self.plugin_sources.clear()
        self._loaded["plugins"] = False
        importlib.invalidate_caches()

    def table(self) -> dict[str, Entry]:
        self._ensure_builtin()
        self._load_plugins()
        return {**self._builtin, **self._plugins, **self.registered}

    def register(self, name: str, factory: Callable, description: str = "") -> None:
        if name in set(self._reserved()):
            raise AgentrtError(f"'{name}' is a reserved name; choose another {self.kind} name")
        self.registered[name] = (factory, description or getattr(factory, "description", "") or "")

    def unregister(self, name: str) -> None:
        self.registered.pop(name, None)

    # ------------------------------------------------------------------ look-ups
    def names(self) -> list[str]:
        return list(self.table())

    def describe(self, name: str) -> str:
        entry = self.table().get(name)
        return entry[1] if entry is not None else ""

    def check(self, name: str) -> None:
        if name not in self.table():
            raise unknown_name(self.kind, name, self.names())

    def cls(self, name: str) -> type | None:
        """The class behind a name (None for a plain factory)."""
        entry = self.table().get(name)
        f = entry[0] if entry is not None else None
        return f if isinstance(f, type) else None

    def parameters(self, name: str) -> list[inspect.Parameter] | None:
        c = self.cls(name)
        return None if c is None else class_parameters(c)

    def option_names(self, name: str) -> list[str] | None:
        """The keyword options `name` takes (`seed` aside), in signature order; None when they
        cannot be told (a plain factory, or options passed on to no class)."""
        params = self.parameters(name)
        return None if params is None else [p.name for p in params]

    def flag_names(self, name: str) -> set[str]:
        """The options of `name` that default to true or false: they take a bool and nothing else."""
        return {p.name for p in self.parameters(name) or [] if isinstance(p.default, bool)}

    def options_text(self, name: str) -> str:
        """`OPTION=DEFAULT, ...` of `name` (for `agentrt policies --options` and the like)."""
        params = self.parameters(name)
        if params is None:
            return "(options not known: a plain factory)"
        shown = [p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}" for p in params]
        return ", ".join(shown) or "(none)"

    def listing(self, options: bool = False, extra: dict[str, str] | None = None) -> list[str]:
        """One line per component: name and description, with `options` its options too."""
        out = []
        for n in self.names():
            out.append(f"{n:18s} {self.describe(n)}")
            if options:
                out.append(f"{'':18s} options: {self.options_text(n)}")
        for n, d in (extra or {}).items():
            out.append(f"{n:18s} {d}")
        return out

    def check_options(self, name: str, options: dict) -> None:
        """Refuse an option `name` does not take, and a boolean option that is not a bool."""
        valid = self.option_names(name)
        if valid is not None:
            unknown = sorted(set(options) - set(valid) - {"seed"})
            if unknown:
                raise AgentrtError(f"bad option for {self.kind} '{name}': no option {', '.join(map(repr, unknown))}; "
                                   f"valid options: {', '.join(valid) or 'none'}")
        for opt in sorted(self.flag_names(name) & options.keys()):
            if not isinstance(options[opt], bool):
                raise AgentrtError(f"bad option for {self.kind} '{name}': {opt} must be true or false, "
                                   f"got {options[opt]!r}")

    def make(self, name: str, **options):
        """A fresh component with `options` (its constructor's keywords)."""
        table = self.table()
        if name not in table:
            raise unknown_name(self.kind, name, self.names())
        self.check_options(name, options)
        try:
            return table[name][0](**options)
        except (TypeError, ValueError) as e:
            raise AgentrtError(f"bad option for {self.kind} '{name}': {e}") from None
