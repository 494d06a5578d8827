"""What every operator shares and none owns: :mod:`.errors` (the exceptions, one root),
:mod:`.plugins` (user functions named ``"module:function"``), :mod:`.safepath` (which names from
data, templates and control inputs are accepted) and :mod:`.faults` (named stopping points for
crash tests)."""
