"""A TCP relay that delays what it carries: latency on a link where the kernel has no netem.

    python -m tests.hosts.relay LISTEN_HOST:PORT TARGET_HOST:PORT CONTROL_FILE

Runs inside a host (netns.Host.popen) in front of a service: callers dial LISTEN, the relay dials
TARGET and copies bytes both ways unchanged (TLS passes through end to end, so certificates and
tokens are checked by the service as without it). Each chunk is held until `delay` milliseconds
after it arrived, in each direction, in order — a round trip gains twice the delay, as netem's
`delay` on both ends of a cable would add. `delay` is read from CONTROL_FILE (a number of ms; a
missing or empty file is 0) whenever it changes, so a test turns latency on and off while calls
run. Loss is the kernel's job (nftables in the host, netns.Network.impair).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path


class Delay:
    """The current delay in seconds, re-read from the control file when its mtime changes."""

    def __init__(self, control: Path):
        self.control, self._mtime, self.seconds = control, None, 0.0

    def now(self) -> float:
        try:
            mtime = self.control.stat().st_mtime_ns
        except FileNotFoundError:
            self._mtime, self.seconds = None, 0.0
            return 0.0
        if mtime != self._mtime:
            text = self.control.read_text().strip()
            seconds = float(text) / 1000.0 if text else 0.0
            if seconds != self.seconds:
                print(f"delay {seconds * 1000:.0f} ms", flush=True)  # the log says when traffic met it
            self._mtime, self.seconds = mtime, seconds
        return self.seconds


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: Delay) -> None:
    """Copy reader -> writer, each chunk written `delay` after it was read (order kept)."""
    queue: asyncio.Queue = asyncio.Queue()

    async def send() -> None:
        while (item := await queue.get()) is not None:
            due, chunk = item
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while chunk := await reader.read(65536):
            queue.put_nowait((time.monotonic() + delay.now(), chunk))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait(None)
    try:
        await sender
    except (ConnectionError, OSError):
        pass


async def serve(listen: tuple[str, int], target: tuple[str, int], delay: Delay) -> None:
    async def handle(client_reader, client_writer):
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pump(client_reader, upstream_writer, delay), pump(upstream_reader, client_writer, delay))

    server = await asyncio.start_server(handle, *listen)
    print(f"relay {listen[0]}:{listen[1]} -> {target[0]}:{target[1]}, delay from {delay.control}", flush=True)
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


if __name__ == "__main__":
    asyncio.run(serve(_address(sys.argv[1]), _address(sys.argv[2]), Delay(Path(sys.argv[3]))))
