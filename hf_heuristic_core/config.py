"""`PruningConfig`: what is masked (granularity), how mask values are drawn (relaxation), what replaces a masked
value (ablation), and the relaxation's constants.

The defaults reproduce the recipe of *The Heuristic Core* (appendix B, checked against its released code):
one mask per attention head and per whole MLP block (`granularity="unit"`), mean ablation, hard-concrete masks
(`relaxation="hard_concrete"`) with l = -0.1, r = 1.1, beta = 2/3, eps = 1e-6 and `log_alpha` initialized from
N(10, 0.01). Validation needs only the registries' names, so building a config imports no torch.

The weight-mask papers' settings: `granularity="weight"` (one mask per entry of the Linear / Conv1D weights selected by
`target_modules`, `layers_to_transform`, `mask_bias`; zero ablation of weights) or `"neuron"` (MLP intermediate
neurons); `relaxation="continuous_sparsification"` (Lepori: s init 0, beta 1 -> 200 by an epoch-end schedule, eval
1[s > 0]) or `"gumbel_sigmoid"` (Csordás: keep probability 0.9 at init, tau 1, 4 mask samples per batch, eval
1[l > 0]). `ablation=None` and `binarization=None` resolve to each choice's paper default. Weight masks keep one logit
per weight: `logits_dtype="bfloat16"` stores them (and so their gradients and Adam's moments) in bf16, 8 bytes per
masked weight instead of 16, fine for continuous sparsification's near-zero logits but lossy for Gumbel-sigmoid's
(BENCHMARKS.md, weight masks).

Each method's own settings are an object of its settings class, saved under the method's name (the discriminator):

    PruningConfig(granularity="neuron", relaxation=HardConcreteSettings(init_mean=3.0))
    PruningConfig(relaxation="gumbel_sigmoid", relaxation_settings={"gumbel_tau": 0.5})

`config.relaxation` and `config.granularity` are always the names; `config.relaxation_settings` and
`config.granularity_settings` the objects. The flat keywords of earlier releases (`PruningConfig(init_mean=3.0)`) still
work and warn once; reading `config.init_mean` reads the chosen method's setting. `pruning_config.json` files written
by earlier releases (every method's fields at the top level) load unchanged.

`uniform_layers=True` binarizes to the same count in every layer (heads in whole key/value groups, MLP blocks all
kept or all removed, the same number of MLP neurons): the Minitron / Sheared-LLaMA constraint, which a stock
Transformers config can express, so the slim export loads with plain `from_pretrained` (`relaxations.uniform`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .ablation.names import ABLATION_MODES
from .granularity import GRANULARITIES, granularity_settings_class
from .granularity.settings import GranularitySettings
from .io_utils import atomic_write_text
from .method_settings import MethodSettings
from .relaxations import RELAXATIONS, relaxation_settings_class
from .relaxations.settings import RelaxationSettings

logger = logging.getLogger(__name__)

CONFIG_NAME = "pruning_config.json"

BINARIZATION_RULES = ("topk", "threshold")
BINARIZATION_SCOPES = ("global", "per_layer")
EVAL_MASKS = ("binary", "soft")


@dataclass(frozen=True)
class MethodKind:
    """One kind of method a config chooses (relaxation, granularity): its registry, and its settings' base class."""

    name: str
    default: str
    names: Callable[[], list[str]]
    settings_class: Callable[[str], type[MethodSettings]]
    base: type[MethodSettings]

    @property
    def settings_field(self) -> str:
        return f"{self.name}_settings"


RELAXATION_KIND = MethodKind("relaxation", "hard_concrete", RELAXATIONS.names, relaxation_settings_class,
                             RelaxationSettings)
GRANULARITY_KIND = MethodKind("granularity", "unit", GRANULARITIES.names, granularity_settings_class,
                              GranularitySettings)
# Relaxation first: a setting both kinds could hold is the relaxation's (none of the built-ins share a name).
METHOD_KINDS = (RELAXATION_KIND, GRANULARITY_KIND)


def registered_settings_classes() -> list[type[MethodSettings]]:
    """Every registered granularity's and relaxation's settings class, granularities first (the prune command's
    generated flags, in that order)."""
    return [kind.settings_class(name) for kind in (GRANULARITY_KIND, RELAXATION_KIND) for name in kind.names()]


@dataclass
class PruningConfig:
    """Settings of a pruning run; serialized next to the masks so an artifact explains itself.

    `granularity` / `relaxation` take the method's registered name or its settings object
    (`relaxation=HardConcreteSettings(temperature=0.5)`); `granularity_settings` / `relaxation_settings` take the
    settings as an object or a dict of the fields to change (None: the method's defaults). Each relaxation's
    constants live in its settings class (`relaxations/<name>/settings.py`), each granularity's own fields in its
    (`granularity/<name>/settings.py`: unit `prune_heads`, `prune_mlps`; weight `target_modules`,
    `layers_to_transform`, `mask_bias`, `logits_dtype`).

    Architecture overrides (`layers_path`, `attention_output`, `mlp_output`, `num_heads`) are only needed for
    models the built-in map and the suffix detection do not cover; paths are relative to `model.base_model`
    (`layers_path`) and to one layer (`attention_output`, `mlp_output`).
    """

    # A name, or the method's settings object (the config keeps the name here and the object in *_settings).
    granularity: str | GranularitySettings = GRANULARITY_KIND.default
    relaxation: str | RelaxationSettings = RELAXATION_KIND.default
    granularity_settings: GranularitySettings | dict[str, Any] | None = None
    relaxation_settings: RelaxationSettings | dict[str, Any] | None = None
    # None: the granularity's default ("mean", the paper's; "zero" for granularity="weight": weight masking is zero
    # ablation of weights).
    ablation: str | None = None

    # Mask samples per batch (one per chunk); None: the relaxation's paper default (Gumbel-sigmoid: 4).
    mask_samples: int | None = None

    # How learned masks become 0/1 masks (binarization None: the relaxation's paper rule, topk for hard concrete).
    binarization: str | None = None
    binarization_scope: str = "global"
    # Keep the same number of heads (whole key/value groups under GQA) and the same MLP width in every layer when
    # masks are binarized, so that a slim export is a stock config (`docs/guides/slim_reload.md`).
    uniform_layers: bool = False
    threshold: float = 0.5
    eval_mask: str = "binary"

    freeze_base_model: bool = True

    # Architecture overrides.
    layers_path: str | None = None
    attention_output: str | None = None
    mlp_output: str | None = None
    num_heads: int | None = None
    # Prune a model whose layer lists are only partly covered by the map (e.g. a vision tower left out), on purpose.
    allow_partial_model: bool = False

    # Filled in by PrunableModel: what the masks were made for.
    model_type: str | None = None
    base_model_name_or_path: str | None = None
    base_model_revision: str | None = None
    base_model_class: str | None = None
    # The GGUF file inside base_model_name_or_path the model was read from (None: a Transformers checkpoint).
    base_model_gguf_file: str | None = None
    num_layers: int | None = None
    head_dim: int | None = None
    hidden_size: int | None = None
    mask_shapes: dict[str, list[int]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for kind in METHOD_KINDS:
            name, settings = _resolve_method(kind, getattr(self, kind.name), getattr(self, kind.settings_field))
            object.__setattr__(self, kind.name, name)
            object.__setattr__(self, kind.settings_field, settings)
        if self.ablation is None:
            self.ablation = self.granularity_settings.default_ablation
        if self.binarization is None:
            self.binarization = self.relaxation_settings.paper_binarization
        if self.mask_samples is None:
            self.mask_samples = self.relaxation_settings.default_mask_samples
        self.validate()

    def validate(self) -> None:
        """Reject settings that would silently produce meaningless masks."""
        for kind in METHOD_KINDS:
            name, settings = getattr(self, kind.name), getattr(self, kind.settings_field)
            _check_choice(kind.name, name, tuple(kind.names()))
            expected = kind.settings_class(name)
            if not isinstance(settings, expected):
                raise ValueError(f"PruningConfig: {kind.settings_field} is a {type(settings).__name__}, but the "
                                 f"{name!r} {kind.name} reads {expected.__name__}; pass {expected.__name__}(...) or a "
                                 f"dict of its fields.")
            settings.validate()
        _check_choice("ablation", self.ablation, ABLATION_MODES)
        _check_choice("binarization", self.binarization, BINARIZATION_RULES)
        _check_choice("binarization_scope", self.binarization_scope, BINARIZATION_SCOPES)
        _check_choice("eval_mask", self.eval_mask, EVAL_MASKS)
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"PruningConfig: threshold must be in (0, 1), got {self.threshold}.")
        if not (isinstance(self.mask_samples, int) and self.mask_samples >= 1):
            raise ValueError(f"PruningConfig: mask_samples must be an integer >= 1, got {self.mask_samples!r}.")
        if self.uniform_layers and not self.granularity_settings.supports_uniform_layers:
            having = [name for name in GRANULARITY_KIND.names()
                      if GRANULARITY_KIND.settings_class(name).supports_uniform_layers]
            raise ValueError(f"PruningConfig: uniform_layers keeps the same number of heads / MLP neurons in every "
                             f"layer, so it needs granularity={' or '.join(map(repr, having))}; {self.granularity!r} "
                             "masks have no per-layer unit count. Drop uniform_layers or change the granularity.")
        if self.num_heads is not None and self.num_heads <= 0:
            raise ValueError(f"PruningConfig: num_heads must be positive, got {self.num_heads}.")

    # The chosen methods' settings read and written as if they were the config's own (the flat form of earlier
    # releases): `config.init_mean` is `config.relaxation_settings.init_mean`.
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _FIELD_NAMES:
            raise AttributeError(name)
        settings = self._settings_holding(name)
        if settings is not None:
            return getattr(settings, name)
        owner = _owner_of(name)
        if owner is not None:
            kind, method = owner
            raise AttributeError(f"PruningConfig has no {name!r}: it is a setting of the {method!r} {kind.name}, and "
                                 f"this config's {kind.name} is {self.__dict__.get(kind.name)!r}.")
        raise AttributeError(f"'PruningConfig' object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FIELD_NAMES or name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        settings = self._settings_holding(name)
        if settings is None:
            owner = _owner_of(name)
            where = f"a setting of the {owner[1]!r} {owner[0].name}, not of this config's" if owner else "no field"
            raise AttributeError(f"PruningConfig: cannot set {name!r}: it is {where}"
                                 f"{' ' + owner[0].name if owner else ''}.")
        setattr(settings, name, value)

    def _settings_holding(self, name: str) -> MethodSettings | None:
        for kind in METHOD_KINDS:
            settings = self.__dict__.get(kind.settings_field)
            if isinstance(settings, MethodSettings) and name in settings.field_names():
                return settings
        return None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def settings_only(self) -> "PruningConfig":
        """A copy without the facts `PrunableModel` records about the model it wrapped (so it can wrap another)."""
        facts = {"num_layers": None, "head_dim": None, "hidden_size": None, "mask_shapes": None}
        return PruningConfig.from_dict({**self.to_dict(), **facts})

    def with_settings(self, **values: Any) -> "PruningConfig":
        """A copy with the chosen methods' settings changed by name (`with_settings(init_mean=3.0)`); a setting of
        a method this config did not choose is refused."""
        data = self.to_dict()
        routed = route_method_settings(values, data["relaxation"], data["granularity"], strict=True)
        for kind in METHOD_KINDS:
            data[kind.settings_field] = {**data[kind.settings_field], **routed[kind.settings_field]}
        return PruningConfig.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PruningConfig":
        """A config from its saved form, or from the flat form earlier releases saved (every method's fields at the
        top level: the chosen methods' are kept, the others' were never read and are dropped)."""
        data = dict(data)
        flat = {key: data.pop(key) for key in list(data) if key not in _FIELD_NAMES and _owner_of(key) is not None}
        unknown = sorted(set(data) - _FIELD_NAMES)
        if unknown:
            raise ValueError(f"PruningConfig.from_dict: unknown field(s) {unknown}; known fields are "
                             f"{sorted(_FIELD_NAMES)} (and the chosen methods' settings).")
        if flat:   # a file of an earlier release: every method's fields, the unchosen ones never read
            data = _with_flat_settings(data, flat, strict=False)
        return cls(**data)

    def save_pretrained(self, save_directory: str | os.PathLike) -> Path:
        """Write `pruning_config.json` atomically (temp file, then rename)."""
        directory = Path(save_directory)
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / CONFIG_NAME
        atomic_write_text(target, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        return target

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> "PruningConfig":
        path = Path(directory)
        if path.is_dir():
            path = path / CONFIG_NAME
        if not path.is_file():
            raise FileNotFoundError(f"No {CONFIG_NAME} at {path}; save one with PruningConfig.save_pretrained(dir).")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not valid JSON ({err}); the file is corrupt or partial, re-save it.") from err
        return cls.from_dict(data)


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(PruningConfig))


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"PruningConfig: {name}={value!r} is not one of {list(choices)}.")


def _method_name(kind: MethodKind, chosen: Any) -> str:
    """The registered name `chosen` (a name or a settings object) stands for."""
    if isinstance(chosen, str):
        _check_choice(kind.name, chosen, tuple(kind.names()))
        return chosen
    if not isinstance(chosen, kind.base):
        raise TypeError(f"PruningConfig: {kind.name} takes a registered name or a {kind.base.__name__} object, got "
                        f"{chosen!r}.")
    names = [name for name in kind.names() if kind.settings_class(name) is type(chosen)]
    if len(names) != 1:
        why = (f"several {kind.name}s share it ({names})" if names else
               f"no registered {kind.name} has it as its settings class")
        raise ValueError(f"PruningConfig: {kind.name}={type(chosen).__name__}(...) does not name one {kind.name}: "
                         f"{why}; pass {kind.name}='<name>', {kind.settings_field}={type(chosen).__name__}(...).")
    return names[0]


def _resolve_method(kind: MethodKind, chosen: Any, settings: Any) -> tuple[str, MethodSettings]:
    """(name, settings object) from what was passed: a name or a settings object, and settings given as None, a
    dict of fields or an object."""
    name = _method_name(kind, chosen)
    if not isinstance(chosen, str):
        if settings is not None:
            raise ValueError(f"PruningConfig: {kind.name} was given as a settings object and {kind.settings_field} "
                             "too; pass one of them.")
        settings = chosen
    settings_class = kind.settings_class(name)
    if settings is None:
        return name, settings_class()
    if isinstance(settings, dict):
        return name, settings_class.from_dict(settings, owner=f"the {name!r} {kind.name}")
    return name, settings


def _owner_of(key: str) -> tuple[MethodKind, str] | None:
    """The (kind, name) of a registered method whose settings have the field `key` (None: no method's)."""
    for kind in METHOD_KINDS:
        for name in kind.names():
            if key in kind.settings_class(name).field_names():
                return kind, name
    return None


def route_method_settings(values: dict[str, Any], relaxation: Any, granularity: Any,
                          strict: bool = True) -> dict[str, dict[str, Any]]:
    """Flat setting values (`{"init_mean": 3.0, "prune_mlps": False}`: the command line's flags, a recipe, the
    keywords of earlier releases) sorted into `{"relaxation_settings": {...}, "granularity_settings": {...}}` of the
    chosen methods. A value for a method not chosen is dropped when it is that method's default (it changes nothing)
    and otherwise refused (`strict`: it would change nothing, silently), or dropped with a log line (`strict=False`,
    files of earlier releases, which carried every method's fields and never read the others'). A key no registered
    method has is a TypeError, as an unknown keyword is."""
    chosen = {RELAXATION_KIND.name: _method_name(RELAXATION_KIND, relaxation),
              GRANULARITY_KIND.name: _method_name(GRANULARITY_KIND, granularity)}
    routed: dict[str, dict[str, Any]] = {kind.settings_field: {} for kind in METHOD_KINDS}
    for key, value in values.items():
        home = next((kind for kind in METHOD_KINDS
                     if key in kind.settings_class(chosen[kind.name]).field_names()), None)
        if home is not None:
            routed[home.settings_field][key] = value
            continue
        owner = _owner_of(key)
        if owner is None:
            raise TypeError(f"PruningConfig got an unexpected keyword argument {key!r}")
        kind, method = owner
        if value == kind.settings_class(method).defaults()[key]:
            continue
        message = (f"PruningConfig: {key}={value!r} is a setting of the {method!r} {kind.name}, and this config's "
                   f"{kind.name} is {chosen[kind.name]!r}, which does not read it; drop it or choose "
                   f"{kind.name}={method!r}.")
        if strict:
            raise ValueError(message)
        logger.info("%s It was never read; dropped.", message)
    return routed


def _with_flat_settings(kwargs: dict[str, Any], flat: dict[str, Any], strict: bool) -> dict[str, Any]:
    """`kwargs` with the flat setting values merged into the chosen methods' settings (applied on top of a settings
    object or dict given as well)."""
    kwargs = dict(kwargs)
    chosen = {kind.name: kwargs.get(kind.name, kind.default) for kind in METHOD_KINDS}
    routed = route_method_settings(flat, chosen["relaxation"], chosen["granularity"], strict=strict)
    for kind in METHOD_KINDS:
        values = routed[kind.settings_field]
        if not values:
            continue
        target = kind.name if not isinstance(chosen[kind.name], str) else kind.settings_field
        given = kwargs.get(target)
        if isinstance(given, MethodSettings):
            kwargs[target] = dataclasses.replace(given, **values)
        else:
            kwargs[kind.settings_field] = {**(given or {}), **values}
    return kwargs


_flat_keywords_warned = False


def _accept_flat_keywords(generated_init: Callable[..., None]) -> Callable[..., None]:
    """The dataclass `__init__`, also taking the flat method keywords of earlier releases (warned once)."""

    @functools.wraps(generated_init)
    def __init__(self: PruningConfig, *args: Any, **kwargs: Any) -> None:
        flat = {key: kwargs.pop(key) for key in list(kwargs) if key not in _FIELD_NAMES}
        if flat:
            _warn_flat_keywords(flat)
            kwargs = _with_flat_settings(kwargs, flat, strict=True)
        generated_init(self, *args, **kwargs)

    return __init__


def _warn_flat_keywords(flat: dict[str, Any]) -> None:
    global _flat_keywords_warned
    owners = {key: _owner_of(key) for key in flat}
    if _flat_keywords_warned or all(owner is None for owner in owners.values()):
        return
    _flat_keywords_warned = True
    shown = ", ".join(f"{key}={value!r}" for key, value in flat.items())
    by_kind: dict[str, dict[str, Any]] = {}
    for key, owner in owners.items():
        if owner is not None:
            by_kind.setdefault(owner[0].settings_field, {})[key] = flat[key]
    instead = ", ".join(f"{field}={values!r}" for field, values in by_kind.items())
    warnings.warn(f"PruningConfig({shown}): method settings as flat keywords are deprecated; pass {instead} (or the "
                  "method's settings object, e.g. relaxation=HardConcreteSettings(init_mean=3.0)). This warning is "
                  "shown once.", FutureWarning, stacklevel=3)


PruningConfig.__init__ = _accept_flat_keywords(PruningConfig.__init__)  # type: ignore[method-assign]
