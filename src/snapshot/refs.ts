// Names of the refs git xet owns.
export const SNAPSHOT_REF_PREFIX = 'refs/xet/snapshots/';
