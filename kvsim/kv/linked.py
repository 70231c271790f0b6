"""Circular doubly linked lists through ``prev`` / ``next`` attributes: the recency order of an
extent store (:mod:`kvsim.kv.extents`) and the lists of a domain's homes
(:mod:`kvsim.serving.cache.extent_homes`). A list is a sentinel node linked to itself; moving an
entry is one unlink and one link, with no search."""

from __future__ import annotations

__all__ = ["link_after", "unlink"]


def link_after(where, node) -> None:
    """Put ``node`` right after ``where`` in a circular doubly linked list (``prev`` / ``next``)."""
    nxt = where.next
    node.prev, node.next = where, nxt
    where.next = nxt.prev = node


def unlink(node) -> None:
    """Take ``node`` out of its circular doubly linked list."""
    node.prev.next, node.next.prev = node.next, node.prev
