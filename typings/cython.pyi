# The part of Cython's pure-Python mode (the `cython` shadow module) kvsim's kernels use, for mypy
# (pyproject.toml's [tool.mypy] mypy_path). Cython ships no types for the `cython` module, so
# without this every decorated kernel function is untyped to its callers and returns Any. At run
# time the shadow module's decorators return the function unchanged, which is what these say; the
# C scalar types are the Python types the pure-Python backend holds (a C double is a float; every
# C integer type is an int). The pointer types and the C-level calls (malloc through `cimport`,
# cast to a pointer, declare of an array) exist only in compiled code paths behind
# `cython.compiled`; they are typed as opaque here.
import builtins
from collections.abc import Callable
from typing import Any, Generic, TypeAlias, TypeVar, overload

_F = TypeVar("_F", bound=Callable[..., Any])
_T = TypeVar("_T")

compiled: bool

double: TypeAlias = float
int: TypeAlias = builtins.int  # noqa: A001
long: TypeAlias = builtins.int
longlong: TypeAlias = builtins.int
ulonglong: TypeAlias = builtins.int
Py_ssize_t: TypeAlias = builtins.int
bint: TypeAlias = bool
void: TypeAlias = None

class _Pointer(Generic[_T]):
    """A C pointer (compiled code only): indexed reads and writes of its element type."""
    def __getitem__(self, index: builtins.int) -> _T: ...
    def __setitem__(self, index: builtins.int, value: _T) -> None: ...

p_double: TypeAlias = _Pointer[builtins.float]
p_long: TypeAlias = _Pointer[builtins.int]
p_Py_ssize_t: TypeAlias = _Pointer[builtins.int]
p_ulonglong: TypeAlias = _Pointer[builtins.int]
NULL: _Pointer[Any]

def cfunc(f: _F) -> _F: ...
def inline(f: _F) -> _F: ...
def nogil(f: _F) -> _F: ...
def locals(**types: object) -> Callable[[_F], _F]: ...
def returns(type: object) -> Callable[[_F], _F]: ...
def exceptval(value: object = ..., *, check: bool = ...) -> Callable[[_F], _F]: ...
@overload
def cast(type: builtins.type[_T], value: object, *, typecheck: bool = ...) -> _T: ...
@overload
def cast(type: object, value: object, *, typecheck: bool = ...) -> Any: ...
def sizeof(type: object) -> builtins.int: ...
def declare(type: object, value: object = ...) -> Any: ...
