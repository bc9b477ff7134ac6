"""tgjax: syntactic language models at scale in JAX/Flax."""

__version__ = "0.1.0"


def load(workdir, step="best"):
    """The checkpoint `step` ("best", "latest" or an int) of any workdir `tgjax train` wrote, with what its family
    can do (`.family`, `.capabilities`, `.scorer()`, `.parser()`, `.sampler()`, `.tree_scorer()`) and its network
    (`.restore()`): a `tgjax.infer.api.LoadedModel`. The one way in: the families' loaders are private to
    `tgjax.infer`."""
    from tgjax.infer.api import load as load_workdir

    return load_workdir(workdir, step)
