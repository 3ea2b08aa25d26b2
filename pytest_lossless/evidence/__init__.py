"""Evidence: provenance (the RunSpec), receipts, their verification, and the summary."""
