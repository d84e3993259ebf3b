"""The worker's side: what a forked child does from its first instruction to ``os._exit`` (:mod:`.main`), its
output pipe (:mod:`.streams`), forgetting the kernel (:mod:`.detach`), and its failure as the user should see it
(:mod:`.user_frames`)."""
