"""What leaves the process after a commit: turns handed to django-q2 (``queue``), committed
events to the channel layer (``sink``, over ``layers``), the cancel doorbell to the worker
running a turn (``doorbell``) and settled webhook turns to their delivery queue
(``deliveries``). Nothing here decides anything: the database row is the truth and these
only make it prompt; each is at-most-once or at-least-once as its docstring says."""
