"""The elasticity core of esp, pure Python: hashing, layouts, state stores, migration, control."""
