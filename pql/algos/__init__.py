"""Update rules, one module per algorithm: pure maths on tensors and modules, no processes.
Which rules and which runner an `algo=` name picks is registered in pql.config.ALGORITHMS."""
