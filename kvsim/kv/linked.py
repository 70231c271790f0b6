"""Circular doubly linked lists through ``prev`` / ``next`` attributes: the recency order of an
extent store (:mod:`kvsim.kv.extents`) and the lists of a domain's homes
(:mod:`kvsim.serving.cache.extent_homes`). A list is a sentinel node linked to itself; moving an
entry is one unlink and one link, with no search."""

from __future__ import annotations

from typing import Protocol, Self, TypeVar

__all__ = ["Linked", "link_after", "unlink"]


class Linked(Protocol):
    """A node of such a list: its neighbours are nodes of its own kind."""

    prev: Self
    next: Self


_Node = TypeVar("_Node", bound=Linked)


def link_after(where: _Node, node: _Node) -> None:
    """Put ``node`` right after ``where`` in a circular doubly linked list (``prev`` / ``next``)."""
    nxt = where.next
    node.prev, node.next = where, nxt
    where.next = nxt.prev = node


def unlink(node: Linked) -> None:
    """Take ``node`` out of its circular doubly linked list."""
    node.prev.next, node.next.prev = node.next, node.prev
