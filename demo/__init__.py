"""Applications built on Liveviews. Chirp, a small Twitter, is the demo."""
