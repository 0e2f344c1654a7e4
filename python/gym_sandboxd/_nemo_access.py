"""Lending a sandbox between NeMo Gym's processes with a scoped credential, not the daemon's token.

``serialize_handle(scope="operate")`` mints one (docs/api.md, "Scoped access"); ``connect`` of
its descriptor talks to the daemon with it alone; ``disconnect`` revokes it. NeMo Gym's
``SandboxAccess`` lends a sandbox to the agent server and the resources server this way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .aio import AsyncGymClient
from .errors import GymError, SandboxNotFoundError, UnauthorizedError

# What an operate borrower may do: commands, uploads, downloads, terminals (and read its sandbox's record).
OPERATE_RIGHTS = ("exec", "files", "pty")


async def operate_access(owner: AsyncGymClient, sandbox_id: str) -> dict[str, Any]:
    """The descriptor's part that lends ``sandbox_id``: a credential the owner's token mints."""
    grant = await owner.grant_access([sandbox_id], list(OPERATE_RIGHTS))
    return {
        "scope": "operate",
        "access": {"grant_id": grant["id"], "token": grant["token"], "expires_at": grant["expiresAt"]},
    }


def borrowed_client(owner: AsyncGymClient, access: Mapping[str, Any]) -> AsyncGymClient:
    """A client of the owner's daemon holding the descriptor's credential instead of any token.

    The credential works only on the daemon that minted it, so no daemon id is compared (the
    daemon's health answers a credential holder with ``ok`` alone).
    """
    return AsyncGymClient(address=dataclasses.replace(owner.address, token=str(access["token"])))


async def release(client: AsyncGymClient, grant_id: str | None, sandbox_id: str) -> None:
    """Revokes a borrowed handle's credential and closes its client; one already dead is a success."""
    try:
        if grant_id is not None:
            await client.revoke_access(grant_id)
    except (UnauthorizedError, SandboxNotFoundError):
        pass
    except GymError as error:
        raise RuntimeError(f"revoking the scoped credential of sandbox {sandbox_id} failed: {error}") from error
    finally:
        await client.aclose()
