"""Step-level reasoning drivers guided by process reward models: steps and budgets, PRMs, A*, foresight and best-of-n."""
