"""Simulator and load generator: realistic elections from a seed, sent to an intake or written as events.

``model.generate(seed, SimConfig)`` makes the election; ``stream.command_stream`` turns it into the
commands the intake takes; ``events.simulate_election`` into the events the intake would record (for
``caucus demo``); ``driver.drive`` sends commands to an intake (HTTP or in-process) and measures.
"""

from producers.simulator.events import election_events, simulate_election
from producers.simulator.model import SimConfig, SimElection, generate
from producers.simulator.stream import SimCommand, command_stream

__all__ = ["SimConfig", "SimElection", "SimCommand", "generate", "command_stream", "election_events", "simulate_election"]
