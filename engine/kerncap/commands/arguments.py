"""Argument types the commands share: argparse rejects a bad value with its own usage
error (exit status 2) before anything runs."""

from __future__ import annotations

import argparse

from kerncap.core.units import parse_bytes


def positive_int(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {v})")
    return v


def non_negative_int(text: str) -> int:
    v = int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (got {v})")
    return v


def positive_float(text: str) -> float:
    v = float(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 (got {text})")
    return v


def non_negative_float(text: str) -> float:
    v = float(text)
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (got {text})")
    return v


def shape(text: str) -> tuple[int, ...]:
    """A tensor shape, "1024,1024" or "-1,256" (kerncap.api.parse_shape)."""
    from kerncap import api
    from kerncap.errors import KerncapError

    try:
        return api.parse_shape(text)
    except KerncapError as exc:
        raise argparse.ArgumentTypeError(f"{exc.message}; {exc.hint}") from None


def byte_size(text: str) -> int:
    """'40G', '512M', '4096'."""
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
