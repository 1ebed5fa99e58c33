// The part of Chirp's page that must never show half a change: the signed-in user's timeline,
// their profile and the profiles of the people the timeline shows, followed as one group
// (docs/PROTOCOL.md, section 5.3). A rename reaches `profiles` and the timeline's rows in two
// pipelines' micro-batches; the group releases both at once, so a name is the same on the
// tweets and in the people list at every frame the page draws.
//
// A group's members are fixed when it opens. When the people to show change (a follow, a new
// author on the timeline), a new group opens beside the current one and takes its place at its
// first frame, so the page never goes blank in between.
//
// A deployment whose log cannot be cut (Kafka, a store cluster) refuses groups
// (`groups_unavailable`): the page then follows the same keys one by one, as pages did before
// groups, and may show a rename in one place a moment before the other.

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
    this.grouped = true; // false once the gateway refused a group: keys one by one
  }

  /** Follow `people`'s profiles with the timeline: at once if the group already does. */
  follow(people) {
    const users = [...new Set(people)].filter((u) => u !== this.user).sort().slice(0, MAX_PEOPLE);
    if (this.people !== null && users.join() === this.people.join()) return;
    this.people = users;
    this.next?.unsubscribe();
    const members = [{ view: 'timeline', key: this.user }, { view: 'profiles', key: this.user },
      ...users.map((u) => ({ view: 'profiles', key: u }))];
    const group = this.grouped ? this.client.group(members) : new Separate(this.client, members);
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
      if (error.code === 'groups_unavailable' && this.grouped) {
        this.grouped = false;
        if (this.next === group) this.next = null;
        const people = this.people;
        this.people = null;
        this.follow(people);
      } else if (this.current === group || this.next === group) {
        this.handlers.error(error);
      }
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

/**
 * The same members as a group's, each its own subscription: for a gateway that refuses groups.
 * It answers what `Home` asks of a group: `members`, `state`, `on`, `reflects`, `unsubscribe`.
 */
class Separate {
  constructor(client, members) {
    this.subs = members.map((m) => client.subscribe(m.view, m.key));
    this.members = members.map((m, i) => ({ view: m.view, key: m.key, get rows() { return this.sub.rows; }, sub: this.subs[i] }));
  }

  get state() {
    return this.subs.every((s) => s.state === 'live') ? 'live' : this.subs.find((s) => s.state !== 'live').state;
  }

  /** `snapshot` once every member has its first, then each member's own events. */
  on(event, handler) {
    if (event === 'snapshot') {
      let ready = false;
      Promise.all(this.subs.map((s) => s.ready())).then(() => {
        ready = true;
        handler({ wasRecovering: false, reason: null });
      }, () => {});
      for (const sub of this.subs) {
        sub.on('snapshot', ({ wasRecovering, reason }) => { if (ready) handler({ wasRecovering, reason }); });
      }
    } else {
      for (const sub of this.subs) sub.on(event, handler);
    }
  }

  reflects(offset) {
    return Promise.all(this.subs.map((s) => s.reflects(offset))).then(() => undefined);
  }

  unsubscribe() {
    for (const sub of this.subs) sub.unsubscribe();
  }
}
