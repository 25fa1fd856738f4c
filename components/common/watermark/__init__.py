"""The watermark itself, shared by the stages that apply it and the one that checks it:
the KGW text watermark (`kgw.py`) and its one parameter model (`params.py`), the secret
key (`keys.py`), and the weight watermark training embeds (`weights.py`). Serving applies
exactly the parameters verification recorded."""
