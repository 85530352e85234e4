"""Where layers live: versioned Parquet layers, the object-store mirror, staging-directory locks, the control-plane catalog."""
