"""The seed article's toy GNN: a message-passing model and a deterministic request corpus."""
