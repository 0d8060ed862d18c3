# gcollrun: the launcher without a scheduler, and its TCP key-value store.
