/**
 * The uid and gid a request's `user` names, read the way `docker exec --user` reads it: a number,
 * `uid:gid`, or a name (with an optional group number) looked up in the sandbox's own
 * /etc/passwd. A name the file lacks cannot start the command (`CommandCannotStart`: exit 126).
 */
import { CommandCannotStart } from './exec-output.ts';

export interface UserIds {
  uid: number;
  gid: number;
}

/** @param passwd reads the sandbox's /etc/passwd; called only for a user given by name. */
export async function resolveUserIds(user: string, passwd: () => Promise<string>): Promise<UserIds> {
  const [name = '', group] = user.split(':');
  let uid = /^\d+$/.test(name) ? Number(name) : Number.NaN;
  let gid = group !== undefined && /^\d+$/.test(group) ? Number(group) : Number.NaN;
  if (Number.isNaN(uid)) {
    const entry = (await passwd())
      .split('\n')
      .map((line) => line.split(':'))
      .find((fields) => fields[0] === name);
    if (entry === undefined) throw new CommandCannotStart(`no user ${name} in the sandbox's /etc/passwd`);
    uid = Number(entry[2]);
    if (group === undefined) gid = Number(entry[3]);
  }
  if (Number.isNaN(gid)) gid = uid;
  return { uid, gid };
}
