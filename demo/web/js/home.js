// The part of Chirp's page that must never show half a change: the signed-in user's timeline,
// their profile and the profiles of the people the timeline shows, followed as one group
// (docs/PROTOCOL.md, section 5.3). A rename reaches `profiles` and the timeline's rows in two
// pipelines' micro-batches; the group releases both at once, so a name is the same on the
// tweets and in the people list at every frame the page draws.
//
// A group's members are fixed when it opens. When the people to show change (a follow, a new
// author on the timeline), a new group opens beside the current one and takes its place at its
// first frame, so the page never goes blank in between.

const MAX_PEOPLE = 14; // a group holds 16 members: the timeline, the user's profile, and these

export class Home {
  /**
   * `handlers`: `frame({wasRecovering, reason})` after each frame of the current group,
   * `state()` when its state changes, `error(error)` when it ends in an error.
   */
  constructor(client, user, handlers) {
    this.client = client;
    this.user = user;
    this.handlers = handlers;
    this.current = null; // the group the page shows
    this.next = null; // a group opened for other people, until its first frame
    this.people = null; // the users whose profiles `next ?? current` follows
  }

  /** Follow `people`'s profiles with the timeline: at once if the group already does. */
  follow(people) {
    const users = [...new Set(people)].filter((u) => u !== this.user).sort().slice(0, MAX_PEOPLE);
    if (this.people !== null && users.join() === this.people.join()) return;
    this.people = users;
    this.next?.unsubscribe();
    const members = [{ view: 'timeline', key: this.user }, { view: 'profiles', key: this.user },
      ...users.map((u) => ({ view: 'profiles', key: u }))];
    const group = this.client.group(members);
    this.next = group;
    group.on('snapshot', ({ wasRecovering, reason }) => {
      if (this.next === group) this.adopt(group);
      if (this.current === group) this.handlers.frame({ wasRecovering, reason });
    });
    group.on('change', () => {
      if (this.current === group) this.handlers.frame({ wasRecovering: false, reason: null });
    });
    group.on('state', () => {
      if (this.current === group) this.handlers.state();
    });
    group.on('error', (error) => {
      if (this.current === group || this.next === group) this.handlers.error(error);
    });
  }

  adopt(group) {
    this.current?.unsubscribe();
    this.current = group;
    this.next = null;
  }

  get state() {
    return this.current?.state ?? 'connecting';
  }

  /** The timeline's rows: tweet id -> tweet. */
  get timeline() {
    return this.current?.members[0].rows ?? new Map();
  }

  /** Whether the group follows `user`'s profile, and so `profile(user)` is the group's. */
  has(user) {
    return this.current !== null && this.current.members.some((m, i) => i > 0 && m.key === user);
  }

  profile(user) {
    return this.current?.members.find((m, i) => i > 0 && m.key === user)?.rows.get('profile');
  }

  /** Resolves once the timeline and the profiles reflect `offset`, whichever group shows them. */
  async reflects(offset) {
    for (;;) {
      while (this.current === null) await new Promise((resolve) => setTimeout(resolve, 50));
      const group = this.current;
      try {
        return await group.reflects(offset);
      } catch (error) {
        if (this.current === group) throw error; // replaced: the new group answers instead
      }
    }
  }
}
