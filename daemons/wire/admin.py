"""Admin micropackets (HIPPI-6400-SC; layout PROJECT CHOICE, spec §4.3)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace

from ..constants import ADMIN_RESPONSE_BIT, ADMIN_ROUTE_SLOTS, ADMIN_ROUTE_UNUSED, MP_DATA_BYTES, AdminCmd, AdminStatus
from .errors import DecodeError

_FIXED = struct.Struct("!BBBBI7sB")  # COMMAND HOP INIT_HOPS ROUTE_IDX XID ROUTE[7] STATUS
ARGS_BYTES = MP_DATA_BYTES - _FIXED.size  # 16
KNOWN_COMMANDS = frozenset(int(c) for c in AdminCmd)


@dataclass(frozen=True)
class Admin:
    command: int
    xid: int = 0
    hop_count: int = 0
    init_hops: int = 0
    route_idx: int = 0
    route: tuple[int, ...] = (ADMIN_ROUTE_UNUSED,) * ADMIN_ROUTE_SLOTS
    status: int = AdminStatus.OK
    args: bytes = field(default=bytes(ARGS_BYTES))

    @property
    def is_response(self) -> bool:
        return bool(self.command & ADMIN_RESPONSE_BIT)

    def encode(self) -> bytes:
        if len(self.route) != ADMIN_ROUTE_SLOTS:
            raise ValueError(f"route has {ADMIN_ROUTE_SLOTS} slots")
        args = bytes(self.args).ljust(ARGS_BYTES, b"\0")
        if len(args) != ARGS_BYTES:
            raise ValueError(f"admin args are at most {ARGS_BYTES} bytes")
        return _FIXED.pack(
            self.command, self.hop_count, self.init_hops, self.route_idx, self.xid, bytes(self.route), self.status
        ) + args

    @classmethod
    def decode(cls, data: bytes) -> Admin:
        """Decode the 32-byte data area.  Unknown commands decode (the receiver
        answers them with INVALID_ADMIN); only structural problems raise."""
        if len(data) != MP_DATA_BYTES:
            raise DecodeError("admin", min(len(data), MP_DATA_BYTES), f"length {len(data)}, expected 32")
        cmd, hop, init, idx, xid, route, status = _FIXED.unpack_from(data)
        if idx > ADMIN_ROUTE_SLOTS:
            raise DecodeError("ROUTE_IDX", 3, f"{idx} beyond the {ADMIN_ROUTE_SLOTS} route slots")
        if hop > init and not cmd & ADMIN_RESPONSE_BIT:
            raise DecodeError("HOP_COUNT", 1, f"hop count {hop} exceeds INIT_HOPS {init}")
        return cls(cmd, xid, hop, init, idx, tuple(route), status, bytes(data[_FIXED.size :]))

    def response(self, command: int, args: bytes = b"", status: int = AdminStatus.OK) -> Admin:
        """The response to this request: same XID, hop count reset to INIT_HOPS."""
        return replace(
            self, command=command, hop_count=self.init_hops, status=status, args=bytes(args).ljust(ARGS_BYTES, b"\0")
        )

    def invalid(self) -> Admin:
        return self.response(AdminCmd.INVALID_ADMIN, bytes([self.command]), AdminStatus.NOT_SUPPORTED)


# --- argument layouts (spec §4.3) ---------------------------------------------
def i_am_args(element_type: int, ports: int, ula: bytes, arrival: int = 0, serial: int = 0) -> bytes:
    """I_AM: type, port count, ULA; a switch adds the port the request entered by and
    its element serial (PROJECT CHOICE, constants.I_AM_*)."""
    return struct.pack("!BB6sBx6s", element_type, ports, ula, arrival, serial.to_bytes(6, "big"))


def parse_i_am(args: bytes) -> tuple[int, int, bytes]:
    etype, ports, ula = struct.unpack_from("!BB6s", args)
    return etype, ports, ula


def parse_i_am_switch(args: bytes) -> tuple[int, int]:
    """(arrival port, element serial) of a switch's I_AM."""
    arrival, serial = struct.unpack_from("!Bx6s", args, 8)
    return arrival, int.from_bytes(serial, "big")


def register_args(address: int, data: int = 0) -> bytes:
    """READ_REGISTER / WRITE_REGISTER and their responses: address(4) data(8)."""
    return struct.pack("!IQ", address, data)


def parse_register(args: bytes) -> tuple[int, int]:
    return struct.unpack_from("!IQ", args)


def element_address_args(address: int) -> bytes:
    return struct.pack("!I", address)


def parse_element_address(args: bytes) -> int:
    (value,) = struct.unpack_from("!I", args)
    return int(value)


def ula_list_args(index: int, total: int, ula: bytes, port: int, more: bool) -> bytes:
    return struct.pack("!HH6sHB", index, total, ula, port, int(more))


def parse_ula_list(args: bytes) -> tuple[int, int, bytes, int, bool]:
    index, total, ula, port, more = struct.unpack_from("!HH6sHB", args)
    return index, total, ula, port, bool(more)


def change_route_args(ula: bytes, port: int) -> bytes:
    return struct.pack("!6sH", ula, port)


def parse_change_route(args: bytes) -> tuple[bytes, int]:
    return struct.unpack_from("!6sH", args)


def port_id_args(ula: bytes, port: int) -> bytes:
    return struct.pack("!6sH", ula, port)
