"""`agentrt bench`: run policies over one trace, with the offline bounds beside them."""
