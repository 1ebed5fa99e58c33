// What this browser remembers per user, because Chirp's views do not show it: whom you
// follow, which posts you like, and which posts you wrote. The views stay the truth for
// everything they do show (names, posts, counts).

function load(user, what) {
  try {
    return JSON.parse(localStorage.getItem(`chirp.${user}.${what}`) ?? 'null');
  } catch {
    return null;
  }
}

function save(user, what, value) {
  localStorage.setItem(`chirp.${user}.${what}`, JSON.stringify(value));
}

export class Memory {
  constructor(user) {
    this.user = user;
    this.following = new Map(Object.entries(load(user, 'following') ?? {})); // user -> bool
    this.liked = new Set(load(user, 'liked') ?? []);
    this.posts = load(user, 'posts') ?? []; // tweet ids, newest last
  }

  setFollowing(other, value) {
    this.following.set(other, value);
    save(this.user, 'following', Object.fromEntries(this.following));
  }

  setLiked(tweet, value) {
    if (value) this.liked.add(tweet);
    else this.liked.delete(tweet);
    save(this.user, 'liked', [...this.liked]);
  }

  addPost(tweet) {
    if (this.posts.includes(tweet)) return;
    this.posts.push(tweet);
    this.posts = this.posts.slice(-50);
    save(this.user, 'posts', this.posts);
  }
}
