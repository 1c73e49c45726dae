"""Partitioned keyed state: per-channel stores versioned by micro-batch id, durable as
changelogs plus snapshots on any pyarrow filesystem. See `store` for the contract."""

from elasticity.state.backend import ColumnarBackend, MemoryBackend, RocksBackend, StoreBackend
from elasticity.state.codecs import (
    ArrowStructCodec,
    BytesCodec,
    Float64Codec,
    Int64Codec,
    JsonCodec,
    SchemaEvolutionError,
    ValueCodec,
    codec_by_name,
    struct_field,
)
from elasticity.state.columnar import ColumnarStore
from elasticity.state.durable import HistoryBackend, HistoryStore, fold_entries
from elasticity.state.files import CorruptFile, Location
from elasticity.state.history import FileHistory, History, MemoryHistory, prune
from elasticity.state.memory import MemoryStore
from elasticity.state.records import ENTRY_SCHEMA, INITIAL_VERSION, Version
from elasticity.state.rocks import RocksStore
from elasticity.state.store import StateStore, StateStoreError, Transaction, TransactionStateError, TxState

__all__ = [
    "ArrowStructCodec",
    "BytesCodec",
    "ColumnarBackend",
    "ColumnarStore",
    "CorruptFile",
    "ENTRY_SCHEMA",
    "FileHistory",
    "Float64Codec",
    "History",
    "HistoryBackend",
    "HistoryStore",
    "INITIAL_VERSION",
    "Int64Codec",
    "JsonCodec",
    "Location",
    "MemoryBackend",
    "MemoryHistory",
    "MemoryStore",
    "RocksBackend",
    "RocksStore",
    "SchemaEvolutionError",
    "StateStore",
    "StateStoreError",
    "StoreBackend",
    "Transaction",
    "TransactionStateError",
    "TxState",
    "ValueCodec",
    "Version",
    "codec_by_name",
    "fold_entries",
    "prune",
    "struct_field",
]
