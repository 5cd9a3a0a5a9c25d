"""Tamper evidence for the log: Merkle trees over the stored records and signed checkpoints of them.

The definitions, in one place (each module's docstring says why):

- leaf: the record's value exactly as the log stores it (Avro single-object bytes, deterministic per
  event), hashed as an RFC 9162 leaf, ``SHA-256(0x00 || value)`` (``scan``);
- order: one tree per partition, leaf ``i`` = the record at offset ``i``. Kafka has no order across
  partitions and both adapters share the partitioner and per-partition offsets, so this is the one
  order every copy of the log agrees on (``checkpoints``);
- checkpoint: every partition's size and root, a root of roots over the partition heads, the time,
  the log's name and the key id, in canonical bytes signed with Ed25519 (``checkpoints``, ``keys``);
- where checkpoints live: as ``CheckpointSigned`` events in the log (covering the log as it stood
  before they were appended; they are ordinary leaves for the next checkpoint) and in a store beside
  the log, with the leaf hashes they cover (``store``).

- beside the value: the key and derived headers are checked against it (``scan``); the other headers
  (the writer) form a columns tree per partition whose roots the checkpoint key also signs
  (``columns``); the log's append time is held to the checkpoints' times (``append_times``);
- witnesses: another party keeps the checkpoints it cosigned, in a directory or served by URL
  (``witness``, ``witness_proofs``, ``witness_service``, ``witness_client``).

``merkle`` is the pure RFC 9162 tree; ``verify``, ``issue`` and ``proofs`` are what ``caucus verify``,
``caucus checkpoint`` and ``caucus prove`` do.
"""
