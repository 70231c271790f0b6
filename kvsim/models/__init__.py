"""LLM specifications and the step-time model."""

from functools import cache

from kvsim.catalog import Catalog, load_packaged
from kvsim.models.llm import MlaSpec, ModelSpec, MoeSpec

__all__ = ["ModelSpec", "MlaSpec", "MoeSpec", "model_catalog"]


@cache
def model_catalog() -> Catalog[ModelSpec]:
    """The shipped model catalog."""
    return load_packaged("kvsim.models.data", "models.yaml", "model", ModelSpec)
