// Names of the refs and marker files git xet owns.
export const SNAPSHOT_REF_PREFIX = 'refs/xet/snapshots/';

/** Present in a restore's git dir until the restore is complete. */
export const RESTORE_MARKER = 'xet-restore-incomplete';
