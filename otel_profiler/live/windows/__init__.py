"""The session's detailed windows: the policy, the triggers that ask for one, the capture that opens,
splits and closes them, and the flush that writes them."""
