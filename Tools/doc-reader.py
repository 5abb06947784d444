#!/usr/bin/env python3
"""An independent reader of purchase-ledger files, written from the docs alone.

    python3 Tools/doc-reader.py LEDGER                 # events as JSON Lines, like `purchase-ledger export`
    python3 Tools/doc-reader.py LEDGER --check-chain [--key-file KEY]
                                                       # also recompute the hash chain and compare every
                                                       # stored link, check every personal value
                                                       # (a packed one unpacked) against its commitment
                                                       # and every signing_headers row against its key

It reads the SQLite file directly (read-only) and uses nothing but the Python standard library:
the LZ4 block decompressor below is its own. Every rule it applies comes from docs/format.md
(frames, payloads, blocks, codecs, personal refs, signed transactions and their packed bodies, the
chain), docs/json.md (what export prints and how) and docs/storage.md (personal values and erasure);
the section comments say which. It exists
to prove those pages are enough to read a ledger: where they were not, the comment says what the
bytes hold (the report on the docs lists each such place).
"""

import base64
import datetime
import hashlib
import hmac
import os
import struct
import sqlite3
import sys
import urllib.parse

MASK64 = (1 << 64) - 1


class FormatError(Exception):
    """The file does not hold what the docs describe (damage, or a gap in the docs)."""


# ---------------------------------------------------------------------------------------------
# Primitives (docs/format.md, "Primitives")
# ---------------------------------------------------------------------------------------------

def read_varint(buf, pos):
    """Unsigned LEB128: 7 bits a byte, low bits first, high bit = more. Returns (value, new pos)."""
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise FormatError("varint runs past the end")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise FormatError("varint longer than 10 bytes")


def unzigzag(n):
    """The signed integer of a zigzag varint: `(n << 1) ^ (n >> 63)` undone."""
    return (n >> 1) ^ -(n & 1)


def to_signed64(n):
    n &= MASK64
    return n - (1 << 64) if n >= 1 << 63 else n


def encode_varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_zigzag(n):
    return encode_varint(((n << 1) ^ (n >> 63)) & MASK64)


def read_bytes(buf, pos):
    """A varint length, then that many bytes."""
    length, pos = read_varint(buf, pos)
    if pos + length > len(buf):
        raise FormatError("length-prefixed bytes run past the end")
    return bytes(buf[pos:pos + length]), pos + length


# ---------------------------------------------------------------------------------------------
# LZ4 block format (docs/format.md, "Tail rows and sealed blocks": codecs 1/4 plain LZ4 block,
# 2/5 LZ4 block with a dictionary, decompressed as by LZ4_decompress_safe_usingDict)
# ---------------------------------------------------------------------------------------------

def lz4_block_decompress(src, raw_size, dictionary=b""):
    """Decompress one LZ4 block (no frame header) of `raw_size` bytes.

    With a dictionary, the dictionary is the prefix of the output: a match may reach back into
    it (at most 65,535 bytes back, the largest LZ4 offset), as LZ4_decompress_safe_usingDict does
    (docs/format.md l.237 names only "LZ4_decompress_safe*"; `dictionaries.bytes` is used whole).
    """
    prefix = bytes(dictionary[-65536:])
    out = bytearray(prefix)
    limit = len(prefix) + raw_size
    pos = 0
    end = len(src)
    while True:
        if pos >= end:
            raise FormatError("LZ4 block ends inside a sequence")
        token = src[pos]
        pos += 1
        # Literals: high nibble, extended by bytes of 255 while they last.
        length = token >> 4
        if length == 15:
            while True:
                if pos >= end:
                    raise FormatError("LZ4 literal length runs past the end")
                extra = src[pos]
                pos += 1
                length += extra
                if extra != 255:
                    break
        if pos + length > end or len(out) + length > limit:
            raise FormatError("LZ4 literals run past the end")
        out += src[pos:pos + length]
        pos += length
        if pos == end:
            break  # the last sequence has literals only
        # Match: 2-byte little-endian offset, low nibble + 4 as length, extended likewise.
        if pos + 2 > end:
            raise FormatError("LZ4 offset runs past the end")
        offset = src[pos] | (src[pos + 1] << 8)
        pos += 2
        if offset == 0 or offset > len(out):
            raise FormatError("LZ4 match offset out of range")
        length = token & 15
        if length == 15:
            while True:
                if pos >= end:
                    raise FormatError("LZ4 match length runs past the end")
                extra = src[pos]
                pos += 1
                length += extra
                if extra != 255:
                    break
        length += 4
        if len(out) + length > limit:
            raise FormatError("LZ4 match runs past the declared size")
        start = len(out) - offset
        if offset >= length:
            out += out[start:start + length]
        else:  # overlapping match: the last `offset` bytes repeat
            pattern = bytes(out[start:])
            out += (pattern * (length // offset + 1))[:length]
    if len(out) != limit:
        raise FormatError("LZ4 block decompresses to %d bytes, not %d" % (len(out) - len(prefix), raw_size))
    return bytes(out[len(prefix):])


# ---------------------------------------------------------------------------------------------
# Tagged payload fields (docs/format.md, "Payloads (version 1)")
# ---------------------------------------------------------------------------------------------

WIRE_VARINT, WIRE_DOUBLE, WIRE_BYTES = 0, 1, 2


def parse_fields(buf):
    """A payload or nested message as {field number: [(wire, value), ...]}, in order.

    A varint key `field << 3 | wire`; wire 0 = varint, 1 = 8-byte little-endian double,
    2 = length-prefixed bytes. Fields are kept even when unknown: the caller skips them.
    """
    fields = {}
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == WIRE_VARINT:
            value, pos = read_varint(buf, pos)
        elif wire == WIRE_DOUBLE:
            if pos + 8 > len(buf):
                raise FormatError("double runs past the end")
            value = struct.unpack_from("<d", buf, pos)[0]
            pos += 8
        elif wire == WIRE_BYTES:
            value, pos = read_bytes(buf, pos)
        else:
            raise FormatError("unknown wire type %d (field %d)" % (wire, number))
        fields.setdefault(number, []).append((wire, value))
    return fields


def last(fields, number, wire=None):
    """The value of a singular field (the last occurrence), or None when absent."""
    for w, v in reversed(fields.get(number, [])):
        if wire is None or w == wire:
            return v
    return None


def text(fields, number):
    value = last(fields, number, WIRE_BYTES)
    return None if value is None else value.decode("utf-8")


def zigzag_field(fields, number):
    value = last(fields, number, WIRE_VARINT)
    return None if value is None else unzigzag(value)


def uint_field(fields, number):
    return last(fields, number, WIRE_VARINT)


def repeated_text(fields, number):
    return [v.decode("utf-8") for w, v in fields.get(number, []) if w == WIRE_BYTES]


def repeated_messages(fields, number):
    return [parse_fields(v) for w, v in fields.get(number, []) if w == WIRE_BYTES]


# ---------------------------------------------------------------------------------------------
# Personal values (docs/format.md, "Personal fields are refs"; docs/storage.md, "Erasure")
# ---------------------------------------------------------------------------------------------

# docs/format.md, "Signed transactions": the dictionary a packed body's LZ4 block is compressed
# against, "821 bytes of UTF-8, one line, written here on several for reading (join them with
# nothing between)", copied from between the `<!-- signed dictionary -->` markers.
SIGNED_DICTIONARY = "".join([
    '{"appAccountToken":"","offerIdentifier":"","offerDiscountType":"FREE_TRIAL","PAY_AS_YOU_GO","PAY_UP_FRONT",',
    '"isUpgraded":true,"revocationDate":,"revocationReason":,"expiresDate":,"subscriptionGroupIdentifier":"",',
    '"webOrderLineItemId":"","type":"Auto-Renewable Subscription","Non-Renewing Subscription","Consumable",',
    '"offerType":,"environment":"Sandbox","Xcode","LocalTesting","FAMILY_SHARED","transactionReason":"RENEWAL",',
    '"deviceVerification":"","deviceVerificationNonce":"","appTransactionId":"","storefrontId":"143441",',
    '{"transactionId":"","originalTransactionId":"","bundleId":"","productId":"","purchaseDate":,',
    '"originalPurchaseDate":,"quantity":1,"type":"Non-Consumable","inAppOwnershipType":"PURCHASED","signedDate":,',
    '"environment":"Production","transactionReason":"PURCHASE","storefront":"USA","price":,"currency":"USD"}',
]).encode("utf-8")
assert len(SIGNED_DICTIONARY) == 821


def base64url(data):
    """base64url without padding (RFC 4648 section 5)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def unpack_value(stored):
    """A `personal_values.value` as the text its commitment covers (docs/format.md, "Signed
    transactions"). A first byte 0xFF (which starts no UTF-8 text) marks a packed body: the format
    byte 0x01, varint length of the payload's JSON, varint length of its LZ4 block, the block
    (compressed against SIGNED_DICTIONARY), then the signature's raw bytes to the end. Unpacked:
    `base64url(payload) + "." + base64url(signature)`. Anything else is the UTF-8 text itself."""
    if not stored or stored[0] != 0xFF:
        return stored
    if len(stored) < 2 or stored[1] != 0x01:
        raise FormatError("a packed personal value of unknown format %r" % stored[1:2])
    payload_size, pos = read_varint(stored, 2)
    block_size, pos = read_varint(stored, pos)
    if pos + block_size > len(stored):
        raise FormatError("a packed personal value's LZ4 block runs past its end")
    payload = lz4_block_decompress(stored[pos:pos + block_size], payload_size, SIGNED_DICTIONARY)
    signature = stored[pos + block_size:]
    return base64url(payload) + b"." + base64url(signature)


def personal_value_block(first, last, raw_size, data):
    """The rows of one `personal_value_blocks` row (docs/format.md, "Personal values"): its data
    is an LZ4 block of `raw_size` bytes; each record is varint(ref - previous ref, the first from
    first_ref - 1), varint(owner), a byte (1: 16 bytes of salt follow; 0: none), varint(length)
    and the value as stored. Refs grow and stay within first_ref...last_ref."""
    if first < 1 or last < first:
        raise FormatError("personal value block %d...%d: its range holds no ref" % (first, last))
    raw = lz4_block_decompress(data, raw_size)
    pos, ref, rows = 0, first - 1, []
    while pos < len(raw):
        step, pos = read_varint(raw, pos)
        if step < 1 or ref + step > last:
            raise FormatError("personal value block %d...%d: a ref out of its range or order" % (first, last))
        ref += step
        owner, pos = read_varint(raw, pos)
        if pos >= len(raw) or raw[pos] not in (0, 1):
            raise FormatError("personal value block %d...%d: a bad salt flag" % (first, last))
        salt = None
        if raw[pos] == 1:
            salt = raw[pos + 1:pos + 17]
            if len(salt) != 16:
                raise FormatError("personal value block %d...%d: a salt runs past the end" % (first, last))
            pos += 16
        pos += 1
        value, pos = read_bytes(raw, pos)
        rows.append((ref, (owner, salt, value)))
    return rows


class PersonalValues:
    """Resolves refs to the `personal_values` rows, or to `[erased ...]` markers once erased."""

    def __init__(self, rows, headers=None):
        self.rows = rows            # ref -> (owner, salt, value as stored) of the rows still present
        self.headers = headers      # SigningHeaders (migration 0008), or None before it
        self.values = {}            # ref -> text bytes (a packed body unpacked), filled as read
        self.commitments = {}       # ref -> 16-byte commitment, from the field 15 that introduced it
        self.unknown = set()        # refs of elided commitments neither held nor kept (a deletion)

    def value(self, ref):
        """The text bytes of a present row (unpacked if packed), or None if the row is gone."""
        cached = self.values.get(ref)
        if cached is None:
            row = self.rows.get(ref)
            if row is None:
                return None
            cached = self.values[ref] = unpack_value(bytes(row[2]))
        return cached

    def check_commitments(self, erased=()):
        """Every row present matches its commitment: the first 16 bytes of
        SHA-256("purchase-ledger personal value v1" || 0x00 || salt || value), with the salt of
        the row of the value's owner (a user id owns itself; a value of no user, owner 0, has its own).
        A packed body's commitment is over its unpacked text (docs/format.md, "Signed transactions").
        Every value the log introduced is present, unless an erasure (`erased`) removed it."""
        for ref in sorted(self.commitments):
            if ref not in self.rows and ref not in erased:
                raise FormatError("personal value %d is missing and no erasure recorded its removal" % ref)
        for ref, (owner, salt, _) in self.rows.items():
            if owner != 0:
                salt = self.rows.get(owner, (None, None, None))[1]
            if salt is None:
                raise FormatError("personal value %d: no salt" % ref)
            digest = hashlib.sha256(b"purchase-ledger personal value v1\x00" + bytes(salt) + self.value(ref)).digest()
            if self.commitments.get(ref) != digest[:16]:
                raise FormatError("personal value %d does not match its commitment" % ref)

    def note_commitments(self, fields):
        """Field 15: bare pairs, each a varint ref and 16 bytes of commitment (no field keys)."""
        for wire, blob in fields.get(15, []):
            if wire != WIRE_BYTES:
                raise FormatError("field 15 is not bytes")
            pos = 0
            while pos < len(blob):
                ref, pos = read_varint(blob, pos)
                if pos + 16 > len(blob):
                    raise FormatError("field 15 ends inside a commitment")
                self.commitments.setdefault(ref, blob[pos:pos + 16])
                pos += 16

    def resolve(self, fields, number, is_user):
        """A personal field as (text, erased): wire 0 is a ref (since 0007), wire 2 the value
        itself (before). An erased ref reads as its marker, with erased = True."""
        entries = fields.get(number)
        if not entries:
            return None, False
        wire, value = entries[-1]
        if wire == WIRE_BYTES:
            return value.decode("utf-8"), False
        if wire != WIRE_VARINT:
            raise FormatError("personal field %d has wire %d" % (number, wire))
        stored = self.value(value)
        if stored is not None:
            try:
                return stored.decode("utf-8"), False
            except UnicodeDecodeError:
                # No writer stores such a value (verify reports it against its commitment).
                raise FormatError("personal value %d is not UTF-8 text" % value)
        # A user id, or a value whose elided commitment is neither held nor kept (deleted without
        # an erasure), reads as its ref: no commitment says which value it was.
        if is_user or value in self.unknown:
            return "[erased %d]" % value, True
        commitment = self.commitments.get(value)
        if commitment is None:
            raise FormatError("ref %d has no row and no commitment before it" % value)
        return "[erased %s]" % commitment[:6].hex(), True

    def read(self, fields, number, is_user):
        return self.resolve(fields, number, is_user)[0]


class SigningHeaders:
    """`signing_headers (digest, header)`: a JWS header's text by the SHA-256 of that text
    (docs/format.md, "Signed transactions")."""

    def __init__(self, rows):
        self.rows = {bytes(digest): header for digest, header in rows}

    def check(self):
        """`verify` names a row that no longer hashes to its key; --check-chain does the same."""
        for digest, header in self.rows.items():
            data = header if isinstance(header, bytes) else header.encode("utf-8")
            if hashlib.sha256(data).digest() != digest:
                raise FormatError("signing_headers row %s does not hash to its key" % digest.hex())

    def header(self, digest):
        header = self.rows.get(bytes(digest))
        if header is None:
            raise FormatError("no signing_headers row for digest %s" % bytes(digest).hex())
        return header if isinstance(header, str) else header.decode("utf-8")


# ---------------------------------------------------------------------------------------------
# Event payloads to export objects (docs/format.md's payload table, docs/json.md's events table)
# ---------------------------------------------------------------------------------------------

KINDS = ["consumable", "nonConsumable", "autoRenewable", "nonRenewing"]
ENVIRONMENTS = ["production", "sandbox", "xcode"]
OWNERSHIPS = ["purchased", "familyShared"]
OFFER_TYPES = {1: "introductory", 2: "promotional", 3: "code", 4: "winBack"}
CANCEL_REASONS = {0: "user", 1: "transactionFinished"}

# docs/format.md, "The canonical frame and the hash chain": rule codes in flags bits 1-7.
RULES = {
    1: "unknownProduct", 2: "duplicateTransaction", 3: "finishWhilePurchasing",
    4: "finishWhileDeferred", 5: "alreadyFinished", 6: "finishBeforeCopyOut",
    7: "contentURLAfterFinish", 8: "downloadAfterFinish", 9: "illegalDownloadTransition",
    10: "copyOutBeforeFinished", 11: "contentKeyMismatch", 12: "restoreInProgress",
    13: "illegalTransactionTransition", 14: "noRestoreInProgress", 15: "duplicateDownload",
    16: "unverifiedTransaction", 17: "assetPackVersionDown", 18: "assetPackNotReady",
    19: "signedFieldsDiffer", 20: "productViewNotPresented", 21: "illegalProductViewTransition",
    22: "productViewOverlap",
}


def put(obj, key, value):
    """export writes an optional field only when it is present (docs/json.md, "Events")."""
    if value is not None:
        obj[key] = value


def enum_name(names, code, what):
    try:
        return names[code]
    except (IndexError, KeyError):
        raise FormatError("unknown %s code %d" % (what, code))


def decode_error(blob, personal):
    """An error message: 1 domain, 2 code zigzag, 3 message (personal)."""
    f = parse_fields(blob)
    error = {}
    put(error, "domain", text(f, 1))
    put(error, "code", zigzag_field(f, 2))
    put(error, "message", personal.read(f, 3, False))
    return error


def error_field(fields, number, personal):
    blob = last(fields, number, WIRE_BYTES)
    return None if blob is None else decode_error(blob, personal)


def downloads_field(obj, fields):
    """Field 6, repeated {1 download, 2 content, 3 version, 4 length zigzag}; field 7 = 1 when an
    empty list was given (so export prints `[]`)."""
    items = repeated_messages(fields, 6)
    if items:
        obj["downloads"] = [
            {"download": text(d, 1), "content": text(d, 2), "contentVersion": text(d, 3),
             "contentLength": zigzag_field(d, 4)}
            for d in items
        ]
    elif uint_field(fields, 7) == 1:
        obj["downloads"] = []


def signed_transaction(blob, personal):
    """A Signed message (docs/format.md, "Signed transactions") as the JWS text export prints.

    In a ledger: field 1 (wire 2) the SHA-256 of the header part's text, the key of its
    `signing_headers` row; field 2 (wire 0) the ref of the body (payload "." signature) in
    `personal_values`, its commitment in the event's top-level field 15. It reads back as
    header + "." + body; an erased body as its marker alone, no header. Field 3 (wire 2), "in a
    payload that holds its values as text (outside a ledger)", is the whole JWS.
    GAP: "field 3 (wire 2)" does not say of which message; read here as the Signed message's own
    field 3 (for transactionRevoked, field 3 of the event is wire 2 in both forms).
    GAP: the page says an event whose header row is gone "does not decode", not whether that holds
    when its body was erased too (and reads without the header); here it does not decode either.
    """
    s = parse_fields(blob)
    whole = text(s, 3)
    if whole is not None:
        return whole
    digest = last(s, 1, WIRE_BYTES)
    if digest is None or len(digest) != 32:
        raise FormatError("a Signed message without a 32-byte header digest")
    if personal.headers is None:
        raise FormatError("a Signed message in a ledger without signing_headers")
    header = personal.headers.header(digest)
    body, erased = personal.resolve(s, 2, False)
    if body is None:
        raise FormatError("a Signed message without a body")
    return body if erased else header + "." + body


def terms_field(obj, fields, personal):
    """Field 8, the money as paid (docs/json.md), flattened into the event object; its field 9,
    a Signed message, is `signedTransaction` (last: docs/json.md lists it after `unverified`)."""
    blob = last(fields, 8, WIRE_BYTES)
    if blob is None:
        return
    t = parse_fields(blob)
    put(obj, "price", text(t, 1))
    put(obj, "currency", text(t, 2))
    put(obj, "storefront", text(t, 3))
    env = uint_field(t, 4)
    if env is not None:
        obj["environment"] = enum_name(ENVIRONMENTS, env, "environment")
    own = uint_field(t, 5)
    if own is not None:
        obj["ownership"] = enum_name(OWNERSHIPS, own, "ownership")
    offer_type = uint_field(t, 6)
    offer_id = text(t, 7)
    if offer_type is not None or offer_id is not None:
        offer = {}
        if offer_type is not None:
            offer["type"] = enum_name(OFFER_TYPES, offer_type, "offer type")
        put(offer, "id", offer_id)
        obj["offer"] = offer
    put(obj, "unverified", text(t, 8))
    signed = last(t, 9, WIRE_BYTES)
    if signed is not None:
        obj["signedTransaction"] = signed_transaction(signed, personal)


def exact_or_double(fields, scaled_number, scale, double_number):
    """A double stored as an exact zigzag multiple of 1/scale, or else as a double."""
    scaled = zigzag_field(fields, scaled_number)
    if scaled is not None:
        return scaled / scale
    return last(fields, double_number, WIRE_DOUBLE)


def decode_payload(code, f, p):
    """The fields of one event, in docs/json.md's order; `p` resolves personal fields."""
    o = {}
    if code == 1:  # productRegistered
        o["product"] = text(f, 1)
        o["kind"] = enum_name(KINDS, uint_field(f, 2) or 0, "product kind")
        o["price"] = text(f, 3)
        o["currency"] = text(f, 4)
        o["downloadable"] = uint_field(f, 5) == 1
        contents = repeated_messages(f, 6)
        if contents:
            o["contents"] = [{"content": text(c, 1), "contentVersion": text(c, 2),
                              "contentLength": zigzag_field(c, 3)} for c in contents]
        related = repeated_text(f, 7)
        if related:
            o["relatedProducts"] = related
        put(o, "title", text(f, 8))
    elif code == 2:  # contentVersionPublished
        o["product"] = text(f, 1)
        o["content"] = text(f, 2)
        o["contentVersion"] = text(f, 3)
    elif code == 3:  # paymentQueued
        o["transaction"] = text(f, 1)
        o["product"] = text(f, 2)
        # GAP (docs/json.md l.75/81): export prints `quantity` always, 1 when field 3 is absent.
        quantity = uint_field(f, 3)
        o["quantity"] = 1 if quantity is None else quantity
        put(o, "user", p.read(f, 4, True))
    elif code == 4:  # transactionDeferred
        o["transaction"] = text(f, 1)
    elif code in (5, 7):  # transactionPurchased, transactionRestored
        o["transaction"] = text(f, 1)
        if code == 7:
            put(o, "originalTransaction", p.read(f, 3, False))
        put(o, "product", text(f, 2))
        put(o, "user", p.read(f, 4, True))
        put(o, "storeTransactionId", p.read(f, 5, False))
        downloads_field(o, f)
        terms_field(o, f, p)
    elif code == 6:  # transactionFailed
        o["transaction"] = text(f, 1)
        put(o, "error", error_field(f, 2, p))
    elif code == 8:  # transactionRevoked
        o["transaction"] = text(f, 1)
        put(o, "reason", p.read(f, 2, False))
        signed = last(f, 3, WIRE_BYTES)
        if signed is not None:
            o["signedTransaction"] = signed_transaction(signed, p)
    elif code == 9:  # transactionFinished
        o["transaction"] = text(f, 1)
        if uint_field(f, 2) == 1:
            o["discardContent"] = True
    elif code in (10, 12, 13):  # downloadStarted / Paused / Resumed
        o["download"] = text(f, 1)
    elif code == 11:  # downloadProgressed
        o["download"] = text(f, 1)
        put(o, "progress", exact_or_double(f, 3, 1e6, 2))
        put(o, "bytesWritten", zigzag_field(f, 4))
        put(o, "timeRemaining", exact_or_double(f, 6, 1e3, 5))
    elif code == 14:  # downloadCancelled
        o["download"] = text(f, 1)
        # GAP (docs/json.md l.75/90): export prints `reason` always, "user" when field 2 is absent.
        o["reason"] = enum_name(CANCEL_REASONS, uint_field(f, 2) or 0, "cancel reason")
    elif code == 15:  # downloadFinished
        o["download"] = text(f, 1)
        put(o, "contentURL", p.read(f, 2, False))
    elif code == 16:  # downloadFailed
        o["download"] = text(f, 1)
        put(o, "error", error_field(f, 2, p))
    elif code == 17:  # contentCopiedOut
        o["download"] = text(f, 1)
        put(o, "destination", p.read(f, 2, False))
        put(o, "checksum", text(f, 3))
        put(o, "bytesCopied", zigzag_field(f, 4))
    elif code == 18:  # contentDeleted
        o["product"] = text(f, 1)
    elif code == 19:  # restoreStarted
        put(o, "user", p.read(f, 1, True))
    elif code == 20:  # restoreCompleted
        pass
    elif code == 21:  # restoreFailed
        put(o, "error", error_field(f, 2, p))
    elif code == 22:  # contentRegistered
        put(o, "url", p.read(f, 1, False))
        o["download"] = text(f, 2)
        put(o, "contentLength", zigzag_field(f, 3))
    elif code in (23, 24, 25, 26, 27, 28, 29, 30):  # asset packs
        o["pack"] = text(f, 1)
        if code == 23:
            o["version"] = zigzag_field(f, 2)
            o["unlockedBy"] = repeated_text(f, 3)
        elif code == 28:
            o["version"] = zigzag_field(f, 3)
            put(o, "error", error_field(f, 2, p))
        elif code != 29:
            o["version"] = zigzag_field(f, 2)
            if code == 25:
                o["progress"] = last(f, 3, WIRE_DOUBLE)
    elif code == 31:  # storePaymentPromoted
        o["product"] = text(f, 1)
        o["accepted"] = uint_field(f, 2) == 1
    elif code == 32:  # personalDataErased
        refs = []
        for wire, value in f.get(1, []):
            if wire == WIRE_VARINT:
                refs.append(unzigzag(value))
            else:  # packed, should a writer ever pack them
                pos = 0
                while pos < len(value):
                    v, pos = read_varint(value, pos)
                    refs.append(unzigzag(v))
        o["refs"] = refs
    elif code in (36, 37, 38, 39):  # store product views
        o["view"] = text(f, 1)
        if code == 36:
            item = uint_field(f, 3)
            if item is None or item == 0:
                raise FormatError("a store product view without its item")
            o["item"] = str(item)
            style = uint_field(f, 4)
            o["style"] = "sheet" if style is None else enum_name({1: "overlay"}, style, "style")
            put(o, "affiliateToken", text(f, 5))
            put(o, "campaignToken", text(f, 6))
            put(o, "providerToken", text(f, 7))
        elif code == 38:
            put(o, "error", error_field(f, 2, p))
    else:
        raise FormatError("unknown event type %d" % code)
    return o


TYPE_NAMES = {
    1: "productRegistered", 2: "contentVersionPublished", 3: "paymentQueued",
    4: "transactionDeferred", 5: "transactionPurchased", 6: "transactionFailed",
    7: "transactionRestored", 8: "transactionRevoked", 9: "transactionFinished",
    10: "downloadStarted", 11: "downloadProgressed", 12: "downloadPaused",
    13: "downloadResumed", 14: "downloadCancelled", 15: "downloadFinished",
    16: "downloadFailed", 17: "contentCopiedOut", 18: "contentDeleted",
    19: "restoreStarted", 20: "restoreCompleted", 21: "restoreFailed",
    22: "contentRegistered", 23: "assetPackPublished", 24: "assetPackBegan",
    25: "assetPackProgressed", 26: "assetPackPaused", 27: "assetPackFinished",
    28: "assetPackFailed", 29: "assetPackRemoved", 30: "assetPackOpened",
    31: "storePaymentPromoted", 32: "personalDataErased",
    36: "storeProductViewPresented", 37: "storeProductViewLoaded", 38: "storeProductViewFailed",
    39: "storeProductViewDismissed",
}


# ---------------------------------------------------------------------------------------------
# Printing (docs/json.md, "How values are printed")
# ---------------------------------------------------------------------------------------------

# Characters the CLI writes as \uXXXX besides JSON's own escapes: DEL, C1 controls, U+061C,
# U+200E, U+200F, U+202A-U+202E, U+2066-U+2069.
_TERMINAL_UNSAFE = {0x7F, 0x061C, 0x200E, 0x200F}
_TERMINAL_UNSAFE.update(range(0x80, 0xA0))
_TERMINAL_UNSAFE.update(range(0x202A, 0x202F))
_TERMINAL_UNSAFE.update(range(0x2066, 0x206A))
# GAP (docs/json.md l.112, "strings as JSON escapes them"): only \n, \r, \t, \" and \\ get
# short escapes; \b and \f are written \u0008 and \u000c like every other control character.
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPES = {}
for _c in range(0x20):
    _ESCAPES[_c] = "\\u%04x" % _c
for _c in _TERMINAL_UNSAFE:
    _ESCAPES[_c] = "\\u%04x" % _c
for _k, _v in _SHORT_ESCAPES.items():
    _ESCAPES[ord(_k)] = _v


def json_string(s):
    return '"' + s.translate(_ESCAPES) + '"'


def json_double(x):
    """A whole number as `N.0`, else the shortest round-tripping decimal; exponent form below
    1e-4 or from 1e16 on. Python's repr() follows exactly these rules."""
    if x != x or x in (float("inf"), float("-inf")):
        raise FormatError("a stored double is not finite")
    return repr(x)


def json_value(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return json_double(v)
    if isinstance(v, str):
        return json_string(v)
    if isinstance(v, list):
        return "[" + ",".join(json_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(json_string(k) + ":" + json_value(x) for k, x in v.items()) + "}"
    raise TypeError(type(v))


EPOCH = datetime.datetime(1970, 1, 1)


def rfc3339(ns):
    """UTC, milliseconds always, and more digits only when the time has them."""
    seconds, frac = divmod(ns, 1_000_000_000)
    stamp = (EPOCH + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
    if frac % 1_000_000 == 0:
        digits = "%03d" % (frac // 1_000_000)
    elif frac % 1000 == 0:
        digits = "%06d" % (frac // 1000)
    else:
        digits = "%09d" % frac
    return "%s.%sZ" % (stamp, digits)


# ---------------------------------------------------------------------------------------------
# The log: sealed blocks, then tail rows (docs/format.md, "Tail rows and sealed blocks")
# ---------------------------------------------------------------------------------------------

class Event:
    __slots__ = ("seq", "type", "flags", "at_ns", "recorded_ns", "version", "payload", "link_prefix")

    def __init__(self, seq, type_, flags, at_ns, recorded_ns, version, payload, link_prefix=None):
        self.seq = seq
        self.type = type_
        self.flags = flags
        self.at_ns = at_ns
        self.recorded_ns = recorded_ns
        self.version = version
        self.payload = payload
        self.link_prefix = link_prefix


def read_time_delta(buf, pos):
    """A block frame's time delta, tagged in the 2 low bits of a varint:
    `zigzag(ms) << 2 | 1` whole milliseconds, `zigzag(ns) << 2` nanoseconds, and for "very large
    deltas" (docs/format.md l.214, "`3` + zigzag") the varint 3 alone, then a second varint,
    zigzag(ns). GAP: the page does not say "3 + zigzag" is two varints rather than
    `zigzag << 2 | 3`; the bytes hold two (e.g. `03 fd9fe9d0f9ffffffff01`), and the CLI reads
    blocks re-encoded that way. Tag 2 is not used."""
    value, pos = read_varint(buf, pos)
    tag = value & 3
    if tag == 0:
        return unzigzag(value >> 2), pos
    if tag == 1:
        return unzigzag(value >> 2) * 1_000_000, pos
    if tag == 3 and value == 3:
        raw, pos = read_varint(buf, pos)
        return unzigzag(raw), pos
    raise FormatError("time delta with tag %d (value %d)" % (tag, value))


LZ4_CODECS = {1, 2, 4, 5, 7, 8}
DICTIONARY_CODECS = {2, 5, 8}
OLD_LAYOUT_CODECS = {0, 1, 2}   # 4 link bytes inline after each frame
NEW_LAYOUT_CODECS = {3, 4, 5, 6, 7, 8}   # 2 link bytes per event after the last frame
ELIDED_CODECS = {6, 7, 8}       # and commitments elided (docs/format.md, "Commitments elided")


def restore_elided(payload, commitment):
    """A payload of a block of codecs 6-8 as the chain hashes it: its top-level field 14 (wire 2,
    the refs alone) replaced in place by field 15, each ref followed by `commitment(ref)`."""
    pos = 0
    found = None
    try:
        while pos < len(payload):
            start = pos
            key, pos = read_varint(payload, pos)
            number, wire = key >> 3, key & 7
            if wire == WIRE_VARINT:
                _, pos = read_varint(payload, pos)
            elif wire == 1:
                pos += 8
            elif wire == WIRE_BYTES:
                blob, pos = read_bytes(payload, pos)
                if number == 14 and found is None:
                    found = (start, pos, blob)
            else:
                return payload
    except FormatError:
        return payload   # bytes that do not parse are hashed as stored
    if found is None:
        return payload
    start, end, blob = found
    refs = []
    p = 0
    try:
        while p < len(blob):
            ref, p = read_varint(blob, p)
            refs.append(ref)
    except FormatError:
        return payload   # refs that do not parse: the payload is hashed as stored, as the CLI does
    pairs = b"".join(encode_varint(ref) + commitment(ref) for ref in refs)
    return payload[:start] + encode_varint(15 << 3 | WIRE_BYTES) + encode_varint(len(pairs)) + pairs + payload[end:]


def decode_block(first_seq, last_seq, codec, dictionary, raw_size, data, commitment):
    """The events of one event_blocks row (`commitment(ref)` makes an elided one again)."""
    if codec in LZ4_CODECS:
        raw = lz4_block_decompress(data, raw_size, dictionary if codec in DICTIONARY_CODECS else b"")
    elif codec in (0, 3, 6):
        raw = bytes(data)
    else:
        raise FormatError("block %d: unknown codec %d" % (first_seq, codec))
    count = last_seq - first_seq + 1
    if codec in NEW_LAYOUT_CODECS:
        frames_end = len(raw) - 2 * count
        if frames_end < 0:
            raise FormatError("block %d too short for its link prefixes" % first_seq)
        prefixes = [raw[frames_end + 2 * i:frames_end + 2 * i + 2] for i in range(count)]
    else:
        frames_end = len(raw)
        prefixes = []
    events = []
    pos = 0
    at_ns = recorded_ns = 0
    for i in range(count):
        seq = first_seq + i
        type_, pos = read_varint(raw, pos)
        flags, pos = read_varint(raw, pos)
        # GAP (docs/format.md l.213-215): deltas are taken in wrapping 64-bit arithmetic. From
        # 1677-09-21T00:12:44.000000001Z to 2262-04-11T23:47:16.854775807Z the writer stores
        # -854,775,810 ns (the true difference minus 2**64), so the sum must wrap too.
        delta, pos = read_time_delta(raw, pos)
        at_ns = to_signed64(at_ns + delta)
        delta, pos = read_time_delta(raw, pos)
        recorded_ns = to_signed64(recorded_ns + delta)
        version, pos = read_varint(raw, pos)
        payload, pos = read_bytes(raw, pos)
        if codec in ELIDED_CODECS:
            payload = restore_elided(payload, commitment)
        if codec in OLD_LAYOUT_CODECS:
            prefix = raw[pos:pos + 4]
            pos += 4
        else:
            prefix = prefixes[i]
        if pos > frames_end:
            raise FormatError("block %d: frame of seq %d runs past the frames" % (first_seq, seq))
        events.append(Event(seq, type_, flags, at_ns, recorded_ns, version, payload, prefix))
    if pos != frames_end:
        raise FormatError("block %d: %d bytes after its last frame" % (first_seq, frames_end - pos))
    return events


def table_exists(db, name):
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def read_log(db, commitment):
    """Every event in seq order: the sealed blocks, then the tail rows after them.
    Yields (event, stored full link or None).

    GAP (docs/storage.md l.3-4 says "The log tables are described in format.md", but format.md
    names only `first_seq`, `codec`, `dictionary_id`, `events.stream` and the block's "full link
    of its last event"): the column names below come from the file's own CREATE TABLE text.
    `event_blocks.raw_size` (the decompressed size, which LZ4 needs) and `last_seq` (how many
    frames and link prefixes) are nowhere in the docs. A sealed event has no tail row left.
    """
    dictionaries = {}
    if table_exists(db, "dictionaries"):
        dictionaries = {row[0]: bytes(row[1]) for row in db.execute("SELECT id, bytes FROM dictionaries")}
    expected = 1
    for first_seq, last_seq, codec, dictionary_id, raw_size, data, last_link in db.execute(
            "SELECT first_seq, last_seq, codec, dictionary_id, raw_size, data, last_link "
            "FROM event_blocks ORDER BY first_seq"):
        if first_seq != expected:
            raise FormatError("block at seq %d, expected %d" % (first_seq, expected))
        dictionary = b""
        if codec in DICTIONARY_CODECS:
            if dictionary_id not in dictionaries:
                raise FormatError("block %d: no dictionary %r" % (first_seq, dictionary_id))
            dictionary = dictionaries[dictionary_id]
        events = decode_block(first_seq, last_seq, codec, dictionary, raw_size, data, commitment)
        for event in events[:-1]:
            yield event, None
        yield events[-1], bytes(last_link)
        expected = last_seq + 1
    # Tail rows: one per event not yet sealed, payload stored as is (the `codec` column,
    # undocumented in docs/format.md, is 0 in every file seen: "binary payload v1, uncompressed").
    for seq, type_, at_ns, recorded_ns, flags, version, codec, payload, link in db.execute(
            "SELECT seq, type, at_ns, recorded_ns, flags, version, codec, payload, link "
            "FROM events WHERE seq >= ? ORDER BY seq", (expected,)):
        if seq != expected:
            raise FormatError("tail row at seq %d, expected %d" % (seq, expected))
        if codec != 0:
            raise FormatError("tail row %d: unknown payload codec %d" % (seq, codec))
        yield Event(seq, type_, flags, at_ns, recorded_ns, version, bytes(payload)), bytes(link)
        expected += 1


# ---------------------------------------------------------------------------------------------
# The hash chain (docs/format.md, "The canonical frame and the hash chain"), for --check-chain
# ---------------------------------------------------------------------------------------------

def canonical_frame(e):
    return b"".join([
        encode_varint(e.seq), encode_varint(e.type), encode_varint(e.flags),
        encode_zigzag(e.at_ns), encode_zigzag(e.recorded_ns), encode_varint(e.version),
        encode_varint(len(e.payload)), e.payload,
    ])


class Chain:
    def __init__(self, info, key):
        if info.get("genesis") == "ledger-id":
            ledger_id = info["ledger_id"]
            self.link = hashlib.sha256(b"purchase-ledger genesis v1\x00" + ledger_id.encode("utf-8")).digest()
        else:
            self.link = bytes(32)
        self.key = key
        key_check = info.get("key_check")
        if key is not None:
            expected = hmac.new(key, b"purchase-ledger chain key check v1", hashlib.sha256).digest()
            if key_check is None or bytes(key_check) != expected:
                raise FormatError("the key does not match ledger_info.key_check")
        elif key_check is not None:
            raise FormatError("a keyed ledger (ledger_info.key_check): give --key-file")

    def advance(self, event):
        data = self.link + canonical_frame(event)
        if self.key is None:
            self.link = hashlib.sha256(data).digest()
        else:
            self.link = hmac.new(self.key, data, hashlib.sha256).digest()
        return self.link


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------

def open_read_only(path):
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        raise FormatError("%s: no ledger (missing or zero bytes)" % path)
    uri = "file:%s?mode=ro" % urllib.parse.quote(os.path.abspath(path))
    return sqlite3.connect(uri, uri=True)


def export(path, out, check_chain=False, key=None):
    db = open_read_only(path)
    try:
        (application_id,) = db.execute("PRAGMA application_id").fetchone()
        if application_id != 0x504C6467:
            raise FormatError("application_id is 0x%08X, not 0x504C6467 (\"PLdg\")" % application_id)
        info = dict(db.execute("SELECT key, value FROM ledger_info"))
        rows = {}
        if table_exists(db, "personal_values"):
            # CAST: a value is bytes (docs/storage.md), and a row edited into TEXT must still be
            # read as its bytes (then fail its commitment), not stop Python's UTF-8 decoding.
            rows = {row[0]: row[1:] for row in db.execute(
                "SELECT ref, owner, salt, CAST(value AS BLOB) FROM personal_values")}
        if table_exists(db, "personal_value_blocks"):
            for first, last, raw_size, data in db.execute(
                    "SELECT first_ref, last_ref, raw_size, CAST(data AS BLOB) FROM personal_value_blocks ORDER BY first_ref"):
                for ref, row in personal_value_block(first, last, raw_size, bytes(data)):
                    if ref in rows:
                        raise FormatError("personal value %d is held twice" % ref)
                    rows[ref] = row
        headers = None
        if table_exists(db, "signing_headers"):
            headers = SigningHeaders(db.execute("SELECT digest, header FROM signing_headers"))
        personal = PersonalValues(rows, headers)
        # docs/format.md, "Commitments elided": a commitment made again from the value and its
        # owner's salt, or, erased, kept in erased_commitments (migration 0011); 16 zero bytes
        # for a ref that is neither (the chain then breaks there).
        kept = {}
        if table_exists(db, "erased_commitments"):
            kept = {ref: bytes(c) for ref, c in db.execute("SELECT ref, commitment FROM erased_commitments")}

        def commitment(ref):
            row = rows.get(ref)
            if row is None:
                if ref not in kept:
                    personal.unknown.add(ref)
                return kept.get(ref, bytes(16))
            owner, salt, _ = row
            if owner != 0:
                salt = rows.get(owner, (None, None, None))[1]
            if salt is None:
                personal.unknown.add(ref)
                return bytes(16)
            return hashlib.sha256(b"purchase-ledger personal value v1\x00" + bytes(salt) + personal.value(ref)).digest()[:16]

        chain = Chain(info, key) if check_chain else None
        write = out.write
        erased = set()
        for event, stored_link in read_log(db, commitment):
            if chain is not None:
                link = chain.advance(event)
                if stored_link is not None and stored_link != link:
                    raise FormatError("the hash chain breaks at event %d" % event.seq)
                if event.link_prefix is not None and link[:len(event.link_prefix)] != event.link_prefix:
                    raise FormatError("the link prefix of event %d does not match" % event.seq)
            fields = parse_fields(event.payload)
            personal.note_commitments(fields)
            if event.type not in TYPE_NAMES:
                raise FormatError("event %d: unknown type %d" % (event.seq, event.type))
            obj = {"seq": event.seq, "type": TYPE_NAMES[event.type], "at": rfc3339(event.at_ns)}
            obj.update(decode_payload(event.type, fields, personal))
            rule = (event.flags >> 1) & 0x7F
            if rule:
                obj["anomaly"] = RULES.get(rule, str(rule))
            if event.flags & 1:
                obj["appendedByLedger"] = True
            write(json_value(obj))
            write("\n")
            if event.type == 32:  # personalDataErased: the refs whose values an erasure removed
                erased.update(obj.get("refs", []))
        if check_chain:
            # A pulled copy lists the refs its fleet store erased (ledger_info.fleet_erased_refs).
            erased.update(int(r) for r in str(info.get("fleet_erased_refs") or "").split(",") if r)
            personal.check_commitments(erased)
            if headers is not None:
                headers.check()
    finally:
        db.close()


def main(argv):
    # The file is only read: sqlite3 opens it with mode=ro (like the CLI's own reads, SQLite
    # leaves an empty -wal and a -shm beside a WAL-mode file it opened).
    args = list(argv)
    check_chain = "--check-chain" in args
    if check_chain:
        args.remove("--check-chain")
    key = None
    if "--key-file" in args:
        i = args.index("--key-file")
        with open(args[i + 1], "rb") as handle:
            key = handle.read()   # every byte is the key, a trailing newline included
        del args[i:i + 2]
    if len(args) != 1:
        sys.stderr.write("usage: doc-reader.py LEDGER [--check-chain [--key-file KEY]]\n")
        return 2
    out = open(sys.stdout.fileno(), "w", encoding="utf-8", newline="\n", buffering=1 << 20, closefd=False)
    try:
        export(args[0], out, check_chain, key)
    except FormatError as error:
        out.flush()
        sys.stderr.write("doc-reader: %s\n" % error)
        return 1
    finally:
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
