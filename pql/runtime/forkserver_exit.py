"""Imported by the roles' forkserver alone (supervisor.role_context preloads it), for this effect:
the server exits without the interpreter's teardown of the torch, pql and tasks it imported
(0.8 s of CPU on 2 cores, measured), as soon as the main process that started it is gone. Under
torchrun every process of a failed replica is then gone within a second of the failure. A role
forked from the server inherits the registration, and exits the same way (exit_without_teardown)."""

import atexit
import os

atexit.register(os._exit, 0)
