"""rclpy start-up for the project's nodes: Ctrl-C / SIGTERM as KeyboardInterrupt.

The nodes handle the signals themselves rather than rclpy, so that they can still publish
a last safe command before the context shuts down.
"""

from __future__ import annotations

import signal

import rclpy
from rclpy.signals import SignalHandlerOptions


def _raise_keyboard_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def init(args=None) -> None:
    """``rclpy.init`` without rclpy's signal handlers; SIGINT and SIGTERM raise
    KeyboardInterrupt (like rclpy's own handlers, also when the parent ignores SIGINT)."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
