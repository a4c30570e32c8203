// `handoff sign <id>`: add a signature (a countersignature when there are others) to a handoff that
// passes its structural checks; a forged or broken handoff is never signed. The signature is made
// before anything is written, then stored beside the handoff (src/handoff/signatures.ts).

import { withObjectsShared } from '../gc/objects-lock';
import { readConfig } from '../git/config';
import { findRepo, repoOpts } from '../git/repo';
import { readRawHandoffs, resolveHandoff } from './objects';
import { makeSignature, storeSignature, type StoredSignature } from './signatures';
import { checkStructure, inspectionError } from './verify';

export async function signHandoff(options: { cwd: string; handoff: string; now?: Date }): Promise<StoredSignature> {
  const repo = await findRepo(options.cwd, true);
  const opts = repoOpts(repo);
  return withObjectsShared(repo.commonDir, async () => {
    const [raw] = await readRawHandoffs([await resolveHandoff(options.handoff, opts)], opts);
    const err = inspectionError(checkStructure(raw));
    if (err) throw err;
    const pending = await makeSignature(raw.id, raw.bytes as Buffer, await readConfig(opts), options.now);
    return storeSignature(pending, raw.commit, repo.objectFormat, opts);
  });
}
