"""Reading rows that existed before streaming began, consistent with the slot's start point."""
