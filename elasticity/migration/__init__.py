"""State migration between layouts (Gedik et al.'s donate / collect with vertical and
horizontal barriers), with a journal, crash recovery and a cost report."""

from elasticity.migration.area import BarrierCheck, DonatedFile, MigrationArea
from elasticity.migration.journal import Journal, Phase
from elasticity.migration.plan import MigrationPlan
from elasticity.migration.protocol import (
    HOOK_POINTS,
    MigrationError,
    Migrator,
    RecordedOutcome,
    RecoveryResult,
    collect_channel,
    donate_channel,
)
from elasticity.migration.registry import LayoutRegistry, RegistryError, RescaleInProgress
from elasticity.migration.report import MigrationReport

__all__ = [
    "BarrierCheck",
    "DonatedFile",
    "HOOK_POINTS",
    "Journal",
    "LayoutRegistry",
    "MigrationArea",
    "MigrationError",
    "MigrationPlan",
    "MigrationReport",
    "Migrator",
    "Phase",
    "RecordedOutcome",
    "RecoveryResult",
    "RegistryError",
    "RescaleInProgress",
    "collect_channel",
    "donate_channel",
]
