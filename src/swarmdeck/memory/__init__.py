"""The blackboard: versioned keys with compare-and-set, scoped to a swarm, a session tree or
the store, kept in the catalog's database."""
