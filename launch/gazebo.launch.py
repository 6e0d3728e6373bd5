"""The project's quadruped in Gazebo (gz sim) with ros2_control and the idyn controller.

    ros2 launch idyn_control gazebo.launch.py formulation:=qp_coulomb

Starts gz sim (ros_gz_sim's gz_sim.launch.py), robot_state_publisher with
urdf/quadruped.urdf, spawns the robot (ros_gz_sim create), bridges /clock and the base
odometry, then spawns joint_state_broadcaster and effort_controller
(effort_controllers/JointGroupEffortController, config/ros2_controllers.yaml) once the
robot exists, and runs idyn_controller with config/quadruped.yaml and use_sim_time.

The URDF's gz_ros2_control <parameters> holds the placeholder
package://idyn_control/config/ros2_controllers.yaml (plain URDF, no xacro $(find)):
it is replaced here by the installed absolute path. Gazebo has no base-state estimator,
so an OdometryPublisher system is added to the model (ground-truth pose and base-frame
twist, REP-105) and bridged to /odom.
"""

from launch import LaunchDescription
from launch.actions import (DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction,
                            RegisterEventHandler)
from launch.event_handlers import OnProcessExit
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "idyn_control"
EXECUTABLE = "idyn_controller"
URDF = "urdf/quadruped.urdf"
CONTROLLERS = "config/ros2_controllers.yaml"
ROBOT_CONFIG = "config/quadruped.yaml"
PLACEHOLDER = f"package://{PACKAGE}/"
MODEL_NAME = "idyn_quadruped"
ODOMETRY = f"""
  <gazebo>
    <plugin filename="gz-sim-odometry-publisher-system" name="gz::sim::systems::OdometryPublisher">
      <odom_frame>odom</odom_frame>
      <robot_base_frame>base</robot_base_frame>
      <dimensions>3</dimensions>
      <odom_publish_frequency>1000</odom_publish_frequency>
      <odom_topic>/model/{MODEL_NAME}/odometry</odom_topic>
    </plugin>
  </gazebo>
</robot>"""


def robot_description(share: str) -> str:
    """The URDF with the placeholder resolved to the installed share directory."""
    with open(f"{share}/{URDF}") as f:
        xml = f.read()
    xml = xml.replace(PLACEHOLDER, share.rstrip("/") + "/")
    head, sep, _ = xml.rpartition("</robot>")
    return head + ODOMETRY if sep else xml


def controller_parameters(context):
    overrides = {"use_sim_time": True}
    formulation = LaunchConfiguration("formulation").perform(context)
    if formulation:
        overrides["formulation"] = formulation
    return overrides


def _launch(context):
    from ament_index_python.packages import get_package_share_directory

    share = get_package_share_directory(PACKAGE)
    gz_share = get_package_share_directory("ros_gz_sim")
    description = robot_description(share)
    world = LaunchConfiguration("world").perform(context)

    gazebo = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(f"{gz_share}/launch/gz_sim.launch.py"),
        launch_arguments={"gz_args": f"-r -v 1 {world}", "on_exit_shutdown": "true"}.items())
    state_publisher = Node(
        package="robot_state_publisher", executable="robot_state_publisher", output="screen",
        parameters=[{"robot_description": description, "use_sim_time": True}])
    spawn = Node(
        package="ros_gz_sim", executable="create", output="screen",
        arguments=["-topic", "robot_description", "-name", MODEL_NAME, "-z", "0.25"])
    bridge = Node(
        package="ros_gz_bridge", executable="parameter_bridge", output="screen",
        arguments=["/clock@rosgraph_msgs/msg/Clock[gz.msgs.Clock",
                   f"/model/{MODEL_NAME}/odometry@nav_msgs/msg/Odometry[gz.msgs.Odometry"],
        remappings=[(f"/model/{MODEL_NAME}/odometry", "/odom")])
    joint_state_broadcaster = Node(
        package="controller_manager", executable="spawner",
        arguments=["joint_state_broadcaster", "--controller-manager", "/controller_manager"])
    effort_controller = Node(
        package="controller_manager", executable="spawner",
        arguments=["effort_controller", "--controller-manager", "/controller_manager",
                   "--param-file", f"{share}/{CONTROLLERS}"])
    controller = Node(
        package=PACKAGE, executable=EXECUTABLE, name="idyn_controller", output="screen", emulate_tty=True,
        parameters=[f"{share}/{ROBOT_CONFIG}", controller_parameters(context)])
    return [
        gazebo, state_publisher, spawn, bridge,
        # the controller manager lives in the gz plugin: spawn controllers once the robot exists
        RegisterEventHandler(OnProcessExit(target_action=spawn, on_exit=[joint_state_broadcaster])),
        RegisterEventHandler(OnProcessExit(target_action=joint_state_broadcaster,
                                           on_exit=[effort_controller])),
        RegisterEventHandler(OnProcessExit(target_action=effort_controller, on_exit=[controller])),
    ]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("formulation", default_value="",
                              description="override config/quadruped.yaml's formulation (empty: keep it)"),
        DeclareLaunchArgument("world", default_value="empty.sdf", description="gz sim world"),
        DeclareLaunchArgument("use_sim_time", default_value="true", choices=["true"],
                              description="always true with Gazebo (kept for a uniform interface)"),
        OpaqueFunction(function=_launch),
    ])
