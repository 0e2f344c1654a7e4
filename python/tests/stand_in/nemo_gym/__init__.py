"""A STAND-IN for NeMo Gym, for this package's tests only: not NeMo Gym.

Written from NeMo Gym's documented sandbox protocol (``nemo_gym.sandbox``: the provider protocol,
its dataclasses and errors, the registry that finds providers through the entry-point group
``nemo_gym.sandbox_providers``, and the ``AsyncSandbox``/``Sandbox`` facades), with the same
module paths, names, fields and behaviour the provider relies on, so the provider's tests run
NeMo Gym's semantics against a real daemon without NeMo Gym installed (it needs Python 3.13 and
packages this machine cannot fetch). The real NeMo Gym replaces it as it is.
"""
