"""``idyn_fault_relay``: the faults of :mod:`idyn_control.sim.faults` between a simulator and
the controller node, over ROS 2 (issue 14 item 2).

    idyn-control experiments faults --ros [--quick]     # runs it between idyn_sim and the controller

It stands where a robot's network and drivers stand: it takes the simulator's state
topics, hands the controller what a :class:`~idyn_control.sim.faults.FaultInjector` lets
through (the same draws, from the same ``seed``, as the lock-step runner) and passes the
controller's commands on to the simulator::

    idyn_sim  /joint_states, /odom, contact estimates ──► idyn_fault_relay ──► ~/joint_states, ~/odom,
              ◄── command_out ◄────────────────── ~/commands ◄─┘            ~/contact_states ──► controller

The controller subscribes the relay's outputs by remapping (``-r /joint_states:=
/idyn_fault_relay/joint_states`` …) and publishes to ``~/commands`` (its ``command_topic``
parameter); nothing in the simulator or the controller knows the relay is there.

Per simulator period (one ``/joint_states`` stamp; the bridge publishes odometry and
contact estimates before it):

- delivered (possibly ``delay`` old): the odometry and joint states of that period, bytes
  unchanged, and its contact estimates with this period's flips (``contact_flip``: 1.0 ↔
  0.0 for one period); the controller's answer goes on to ``command_out``.
- lost (``drop_state``) or in the ``gap``: the controller gets nothing, so it does not tick
  on /joint_states; the actuators keep the last command, which the relay sends on in the
  controller's place so that a lock-step simulator steps. With ``pace_withheld`` the relay
  first waits one period of wall time, so a gap lasts as long on the controller's
  (wall-clock) watchdog as in simulated time.
- once the controller is heard on its own in a run of withheld periods
  (``follow_controller``): a controller that bridges the gap on its own clock (the node's
  ``prediction_horizon``; its timers run on the simulated clock, so it ticks once per
  period the simulator steps) sends a command per period; the relay hands the simulator
  that one, waiting for it at most ``follow_wait`` of wall time, as a robot's drivers get
  the commands at the loop's rate. Without it the simulator ran the gap at the relay's
  wall-clock pace and the controller at its own: on a loaded machine 3-4 simulated
  periods per command, held torques a trotting robot can fall on. A wait that times out
  (a controller that stopped predicting) falls back to pacing until it is heard again.
- a re-published state (same stamp: the lock-step bridge re-sends an unanswered one) gets
  the same treatment again, without a new draw.

Periods start once odometry and contact estimates have arrived (the faults are a legged
robot's: floating base, contacts).

The mass error (the controller's model) and the push (a force in the simulator) are not
the relay's: see :func:`~idyn_control.sim.faults.scaled_urdf` and the bridge's ``push``.
``~/status`` (diagnostic_msgs/DiagnosticArray, 2 Hz) carries the injector's counts and
the relay's own (periods, delivered, held, commands forwarded / unanswered).
"""

from __future__ import annotations

import json
import time
from collections import deque
from typing import Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from nav_msgs.msg import Odometry
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.clock import Clock, ClockType
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from ..errors import IdynError
from ..sim.faults import FaultInjector, Faults
from . import signals
from .conversions import cdr_stamp_ns


NODE_NAME = "idyn_fault_relay"
STATUS_PERIOD_S = 0.5
#: the bridge's (sim_bridge_node) profiles, on both sides: what the simulator and the controller expect
STATE_QOS = QoSProfile(depth=10, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                       durability=DurabilityPolicy.VOLATILE)
COMMAND_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)

PARAMETERS: dict[str, tuple[Any, str]] = {
    "faults": ("{}", "the faults as JSON: sim.faults.Faults fields (drop_state, delay, contact_flip, gap, "
                     "seed, ...); mass_error and push are not the relay's and are refused"),
    "rate": (1000.0, "the simulator's period rate [Hz] (the injector's tick)"),
    "pace_withheld": (True, "wait one period of wall time before holding the command of a withheld period"),
    "follow_controller": (True, "once the controller is heard on its own in a run of withheld periods, hand "
                                "on its next command (predicted) per period instead of the held one"),
    "follow_wait": (0.05, "longest wait for that command [s, wall]; then the held one, and pacing"),
    "joint_states_in": ("/joint_states", "the simulator's joint states"),
    "odom_in": ("/odom", "the simulator's odometry"),
    "contact_states_in": ("/idyn_controller/contact_states", "the simulator's contact estimates"),
    "command_out": ("/effort_controller/commands", "the simulator's command topic"),
}


class FaultRelayNode(Node):
    """The simulator's state → faults → the controller; its commands → the simulator."""

    def __init__(self, **kwargs: Any):
        super().__init__(NODE_NAME, **kwargs)
        for name, (default, description) in PARAMETERS.items():
            self.declare_parameter(name, default, ParameterDescriptor(description=description, read_only=True))
        get = lambda name: self.get_parameter(name).value  # noqa: E731
        fields = json.loads(get("faults"))
        self.faults = Faults.from_dict({k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})
        self.faults.validate()
        if self.faults.mass_error or self.faults.push is not None:
            from ..errors import ConfigError

            raise ConfigError("faults", fields, "mass_error is the controller's model and push the simulator's: "
                              "not a relay fault")
        self.period_s = 1.0 / float(get("rate"))
        self.pace = bool(get("pace_withheld"))
        self.follow = bool(get("follow_controller"))
        self.follow_wait = float(get("follow_wait"))
        self.injector: FaultInjector | None = None  # made at the first period (k from the estimates)
        self._ring: deque = deque()  # (odometry bytes, contact estimates, joint state bytes) per period
        self._odom: bytes | None = None
        self._contacts: np.ndarray | None = None
        self._contacts_msg = Float64MultiArray()
        self._last_stamp = -1
        self._last_lag: int | None = 0
        self._last_cmd: bytes | None = None
        self._awaiting = False
        self._withholding = False   # the last period was withheld (a run of them goes on)
        self._following = False     # this run: the controller was heard on its own; wait for its commands
        self._waiting = False       # a withheld period waits for one (self._wait_timer ends it)
        self._unsent = False        # a command of the controller's own not yet handed on
        self.counts = {"periods": 0, "delivered": 0, "held": 0, "resent_periods": 0, "commands_forwarded": 0,
                       "commands_unanswered": 0, "commands_held": 0, "commands_followed": 0, "follow_timeouts": 0}

        self.pub_js = self.create_publisher(JointState, "~/joint_states", STATE_QOS)
        self.pub_odom = self.create_publisher(Odometry, "~/odom", STATE_QOS)
        self.pub_contacts = self.create_publisher(Float64MultiArray, "~/contact_states", STATE_QOS)
        self.pub_cmd = self.create_publisher(Float64MultiArray, get("command_out"), COMMAND_QOS)
        self.pub_status = self.create_publisher(DiagnosticArray, "~/status", STATE_QOS)
        self.create_subscription(Odometry, get("odom_in"), self._on_odom, STATE_QOS, raw=True)
        self.create_subscription(Float64MultiArray, get("contact_states_in"), self._on_contacts, STATE_QOS)
        self.create_subscription(JointState, get("joint_states_in"), self._on_joint_states, STATE_QOS, raw=True)
        self.create_subscription(Float64MultiArray, "~/commands", self._on_command, COMMAND_QOS, raw=True)
        self.create_timer(STATUS_PERIOD_S, self.publish_status)
        # wall time (the node's clock may be the simulator's, which stands while the relay waits)
        self._wait_timer = self.create_timer(self.follow_wait, self._on_wait_timeout,
                                             clock=Clock(clock_type=ClockType.STEADY_TIME))
        self._wait_timer.cancel()
        self.get_logger().info(f"faults {fields} between {get('joint_states_in')} (and odometry, contact "
                               f"estimates) and the controller; commands on to {get('command_out')}")

    # ------------------------------------------------------------------ state in
    def _on_odom(self, data: bytes) -> None:
        self._odom = data

    def _on_contacts(self, msg: Float64MultiArray) -> None:
        self._contacts = np.array(msg.data, dtype=float)

    def _on_joint_states(self, data: bytes) -> None:
        if self._odom is None or self._contacts is None:
            return  # a period starts with the whole state: odometry and contact estimates first
        stamp = cdr_stamp_ns(data)
        entry = (self._odom, self._contacts.copy(), data)
        if stamp <= self._last_stamp:  # the same period re-sent (lock-step): same fate, newest copy
            self.counts["resent_periods"] += 1
            self._ring[-1] = entry
            if not self._waiting:  # (a period waiting for the controller's command keeps waiting)
                self._act(self._last_lag)
            return
        self._last_stamp = stamp
        if self.injector is None:
            self.injector = FaultInjector(self.faults, self.period_s, nq=0, nv=0, k=self._contacts.size)
            self._ring = deque(maxlen=self.injector.delay_ticks + 1)
        self._ring.append(entry)
        self.counts["periods"] += 1
        self._last_lag = self.injector.decide(stamp * 1e-9)
        self._act(self._last_lag)

    def _act(self, lag: int | None) -> None:
        """Hand the controller the period ``lag`` periods old (with this period's contact
        flips), or nothing (None): then the controller's next command (see
        ``follow_controller``) or the last one goes on to the simulator."""
        if lag is None:
            self.counts["held"] += 1
            self._withholding = True
            if self.follow and self._following:
                if self._unsent:  # it came before this period's state did (the clock is published first)
                    self._send_last("commands_followed")
                else:
                    self._waiting = True  # _on_command or the timer sends
                    self._wait_timer.reset()
                return
            if self.pace:
                time.sleep(self.period_s)
            self._send_last("commands_held")
            return
        self._withholding = False
        self._following = False
        if self._waiting:  # (a simulator that stepped on its own lock-step timeout)
            self._end_wait()
        odom, estimates, js = self._ring[-1 - min(lag, len(self._ring) - 1)]
        flips = self.injector.flips
        if estimates.size == flips.size and flips.any():
            estimates = np.where(flips, 1.0 - estimates, estimates)
        self.counts["delivered"] += 1
        self._awaiting = True
        self._unsent = False
        self.pub_odom.publish(odom)
        self._contacts_msg.data = estimates.tolist()
        self.pub_contacts.publish(self._contacts_msg)
        self.pub_js.publish(js)  # last: the controller ticks on it

    # ------------------------------------------------------------------ commands
    def _on_command(self, data: bytes) -> None:
        self._last_cmd = data
        if self._awaiting:
            self._awaiting = False
            self.pub_cmd.publish(data)
            self.counts["commands_forwarded"] += 1
            return
        # the controller on its own clock (a predicted tick, its watchdog output) during withheld periods
        self.counts["commands_unanswered"] += 1
        self._unsent = True
        if self._waiting:
            self._end_wait()
            self._send_last("commands_followed")
        elif self._withholding:
            self._following = True  # heard: the next withheld period hands on its command

    def _on_wait_timeout(self) -> None:
        """No command from the controller within ``follow_wait``: hold the last one, and pace
        the rest of this run until the controller is heard again."""
        if not self._waiting:
            return
        self._end_wait()
        self._following = False
        self.counts["follow_timeouts"] += 1
        self._send_last("commands_held")

    def _end_wait(self) -> None:
        self._waiting = False
        self._wait_timer.cancel()

    def _send_last(self, count: str) -> None:
        """The newest command goes on for this withheld period: the controller's own
        ("commands_followed": computed on the simulator's newest clock, as it does not tick
        before that moves on), or the one the actuators keep ("commands_held"), so that a
        lock-step simulator steps."""
        self._unsent = False
        if self._last_cmd is not None:
            self.pub_cmd.publish(self._last_cmd)
            self.counts[count] += 1

    # ------------------------------------------------------------------ diagnostics
    def status_values(self) -> dict[str, int | float]:
        injected = self.injector.counts if self.injector is not None else {}
        return {**self.counts, **{f"injected.{k}": v for k, v in injected.items()}}

    def close(self) -> None:
        """Publish the final counts (for whoever listens: the demo's report), then go."""
        if rclpy.ok():
            self.publish_status()
        self.destroy_node()

    def publish_status(self) -> None:
        status = DiagnosticStatus(name=f"{self.get_name()}: faults", level=DiagnosticStatus.OK,
                                  message="relaying", hardware_id="")
        status.values = [KeyValue(key=k, value=str(v)) for k, v in self.status_values().items()]
        msg = DiagnosticArray()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.status = [status]
        self.pub_status.publish(msg)


def main(args=None) -> None:
    """Entry point of ``python -m idyn_control.ros.fault_relay``."""
    signals.init(args)
    node = None
    try:
        from rclpy.experimental import EventsExecutor

        node = FaultRelayNode()
        executor = EventsExecutor()  # 3 state topics and the commands at 1 kHz: the cheaper dispatch
        executor.add_node(node)
        while rclpy.ok():  # spin() held the interpreter here (no callback ran): spin_once lets them in
            executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except IdynError as exc:
        print(f"{NODE_NAME}: {exc}", flush=True)
    finally:
        if node is not None:
            node.close()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
