"""The approval inbox (parked inputs an operator may answer)."""
