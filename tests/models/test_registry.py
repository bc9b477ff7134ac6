"""The registry's switch table: a switch means one registered model, anything else is refused by name."""

import pytest

from tgjax.models import MODEL_NAMES, model_config
from tgjax.models.registry import SPECS, SWITCHES

SIZES = dict(d_model=32, num_layers=3, num_heads=4, ffw_hidden_size=64)
# Values each switch can take (the hybrids' counts stay within num_layers / num_heads).
CANDIDATES = {"tg": (True, False), "smart_memory": (True, False), "distinct_compose": (True, False),
              "linear_relpos": (True, False), "num_unrestricted_layers": (0, 1, 2), "num_unrestricted_heads": (0, 1, 2)}


def switches_of(config):
    return {name: getattr(config, name) for name in SWITCHES}


def test_the_issue_cases_name_the_registered_model():
    with pytest.raises(ValueError, match=r"model.num_unrestricted_layers=2 is not a switch of model 'tg'; the "
                                         r"registered model with it is 'tg_layer_hybrid' \(TG whose top"):
        model_config("tg", 10, **SIZES, num_unrestricted_layers=2)
    with pytest.raises(ValueError, match=r"model.distinct_compose=True is not a switch of model 'txl_cc'; the "
                                         r"registered model with it is 'tg_distinct_mha'"):
        model_config("txl_cc", 10, **SIZES, distinct_compose=True)
    with pytest.raises(ValueError, match=r"model.num_unrestricted_heads=1 is not a switch of model "
                                         r"'tg_layer_hybrid'; the registered model with it is 'tg_head_hybrid'"):
        model_config("tg_layer_hybrid", 10, **SIZES, num_unrestricted_heads=1)


def test_the_layer_hybrid_is_one_model():
    """Unrestricted layers come only with the registered hybrid, and so with its TXL memory."""
    hybrid = model_config("tg_layer_hybrid", 10, **SIZES, num_unrestricted_layers=2)
    assert (hybrid.num_unrestricted_layers, hybrid.smart_memory, hybrid.tg) == (2, False, True)
    assert model_config("tg_layer_hybrid", 10, **SIZES).num_unrestricted_layers == 1  # 0 / unset: one layer


@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.parametrize("switch", SWITCHES)
def test_a_switch_is_accepted_only_where_it_means_that_model(name, switch):
    """Accepted: the result is the registered model (only admitted switches differ). Refused: the models
    the message names each accept that value."""
    registered = switches_of(model_config(name, 10, **SIZES))
    for value in CANDIDATES[switch]:
        try:
            config = model_config(name, 10, **SIZES, **{switch: value})
        except ValueError as error:
            message = str(error)
            assert message.startswith(f"model.{switch}={value!r} is not a switch of model {name!r}; ")
            assert value != registered[switch] and switch not in SPECS[name].admits
            named = [other for other in MODEL_NAMES if f"{other!r} (" in message]
            for other in named:
                assert getattr(model_config(other, 10, **SIZES, **{switch: value}), switch) == value
            continue
        here = switches_of(config)
        if switch in SPECS[name].admits:
            assert here[switch] == (value or 1)  # a hybrid's 0 means one unrestricted layer / head
            here[switch] = registered[switch]
        assert here == registered, f"{name} with {switch}={value!r} is another model"


def test_every_switch_of_every_model_is_reachable_by_some_name():
    """Each combination the table allows is a registered model's: no switch is left without an owner."""
    owners = {(switch, value) for spec in SPECS.values() for switch in SWITCHES
              for value in CANDIDATES[switch]
              if switch in spec.admits or value == switches_of(model_config(spec.name, 10, **SIZES))[switch]}
    missing = {(s, v) for s in SWITCHES for v in CANDIDATES[s]} - owners
    assert missing == set()
